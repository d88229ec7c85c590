package config

import (
	"math"
	"testing"
)

func TestValidateCacheAware(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(ca *CacheAware)
		wantKey string
		wantMsg string
	}{
		{"match threshold above 1", func(ca *CacheAware) { ca.MatchThreshold = 1.2 }, "policy.cache_aware.match_threshold", "1.2 out of range 0..1"},
		{"match threshold negative", func(ca *CacheAware) { ca.MatchThreshold = -0.1 }, "policy.cache_aware.match_threshold", "out of range"},
		{"match threshold NaN", func(ca *CacheAware) { ca.MatchThreshold = math.NaN() }, "policy.cache_aware.match_threshold", "out of range"},
		{"abs threshold negative", func(ca *CacheAware) { ca.BalanceAbsThreshold = -1 }, "policy.cache_aware.balance_abs_threshold", "must not be negative"},
		{"rel threshold below 1", func(ca *CacheAware) { ca.BalanceRelThreshold = 0.9 }, "policy.cache_aware.balance_rel_threshold", "0.9 must be at least 1"},
		{"rel threshold NaN", func(ca *CacheAware) { ca.BalanceRelThreshold = math.NaN() }, "policy.cache_aware.balance_rel_threshold", "at least 1"},
		{"tree too small", func(ca *CacheAware) { ca.MaxTreeBytes = 4096 }, "policy.cache_aware.max_tree_bytes", "4096 must be at least 65536"},
		{"tree negative", func(ca *CacheAware) { ca.MaxTreeBytes = -1 }, "policy.cache_aware.max_tree_bytes", "negative"},
		{"block too small", func(ca *CacheAware) { ca.BlockBytes = 8 }, "policy.cache_aware.block_bytes", "8 out of range 16..4096"},
		{"block too large", func(ca *CacheAware) { ca.BlockBytes = 8192 }, "policy.cache_aware.block_bytes", "out of range"},
	}
	refusals := make([]refusal, len(tests))
	for i, tt := range tests {
		refusals[i] = refusal{tt.name, func(c *Config) { tt.mutate(&c.Policy.CacheAware) }, tt.wantKey, tt.wantMsg}
	}
	checkRefusals(t, refusals)
}

// Edges that are allowed: a threshold of 0 (always follow the best match),
// an infinite relative threshold (never overloaded), the smallest tree
// and both block bounds.
func TestValidateCacheAwareAccepts(t *testing.T) {
	for _, mutate := range []func(ca *CacheAware){
		func(ca *CacheAware) { ca.MatchThreshold = 0 },
		func(ca *CacheAware) { ca.MatchThreshold = 1 },
		func(ca *CacheAware) { ca.BalanceAbsThreshold = 0 },
		func(ca *CacheAware) { ca.BalanceRelThreshold = math.Inf(1) },
		func(ca *CacheAware) { ca.MaxTreeBytes = 65536 },
		func(ca *CacheAware) { ca.BlockBytes = 16 },
		func(ca *CacheAware) { ca.BlockBytes = 4096 },
	} {
		c := validConfig()
		mutate(&c.Policy.CacheAware)
		if err := c.Validate(); err != nil {
			t.Errorf("%+v refused: %v", c.Policy.CacheAware, err)
		}
	}
}

// The keys load from the environment like any other (they are floats and
// ints under a nested struct).
func TestCacheAwareFromEnv(t *testing.T) {
	c, err := Load(Source{
		Data: []byte("prefill: [{url: 'http://p:1'}]\ndecode: [{url: 'http://d:2'}]\n"),
		Env:  []string{"PDLB_POLICY_CACHE_AWARE_MATCH_THRESHOLD=0.5", "PDLB_POLICY_CACHE_AWARE_MAX_TREE_BYTES=1048576"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if ca := c.Policy.CacheAware; ca.MatchThreshold != 0.5 || ca.MaxTreeBytes != 1<<20 || ca.BlockBytes != 64 {
		t.Errorf("cache_aware = %+v, want the two from the environment over the defaults", ca)
	}
}
