package config

import (
	"fmt"
	"math"
)

// checkCacheAware validates policy.cache_aware whichever policies are in
// use, so a reload that switches to cache_aware cannot meet bad values.
func (c *Config) checkCacheAware() *Error {
	ca := c.Policy.CacheAware
	if t := ca.MatchThreshold; math.IsNaN(t) || t < 0 || t > 1 {
		return errorf("policy.cache_aware.match_threshold", fmt.Sprintf("%v out of range 0..1", t))
	}
	// +Inf is allowed: no backend is ever overloaded.
	if r := ca.BalanceRelThreshold; math.IsNaN(r) || r < 1 {
		return errorf("policy.cache_aware.balance_rel_threshold", fmt.Sprintf("%v must be at least 1", r))
	}
	if ca.MaxTreeBytes < minCacheAwareTreeBytes {
		return errorf("policy.cache_aware.max_tree_bytes", fmt.Sprintf("%d must be at least %d", ca.MaxTreeBytes, minCacheAwareTreeBytes))
	}
	if b := ca.BlockBytes; b < 16 || b > 4096 {
		return errorf("policy.cache_aware.block_bytes", fmt.Sprintf("%d out of range 16..4096", b))
	}
	return nil
}

// minCacheAwareTreeBytes is the smallest policy.cache_aware.max_tree_bytes:
// below it a tree holds too few prompts to be worth keeping.
const minCacheAwareTreeBytes = 64 << 10
