package config

import (
	"reflect"
	"testing"
	"time"
)

func TestDefault(t *testing.T) {
	d := Default()
	tests := []struct {
		key  string
		got  any
		want any
	}{
		{"server.host", d.Server.Host, "0.0.0.0"},
		{"server.port", d.Server.Port, 8000},
		{"server.idle_timeout", d.Server.IdleTimeout, 120 * time.Second},
		{"server.max_header_bytes", d.Server.MaxHeaderBytes, 8192},
		{"timeouts.decode_first_byte", d.Timeouts.DecodeFirstByte, 600 * time.Second},
		{"limits.max_body_bytes", d.Limits.MaxBodyBytes, 67108864},
		{"limits.max_batch_size", d.Limits.MaxBatchSize, 1024},
		{"log.format", d.Log.Format, "json"},
		{"bootstrap.mode", d.Bootstrap.Mode, "embedded"},
		{"bootstrap.lookup_attempts", d.Bootstrap.LookupAttempts, 20},
		{"bootstrap.allowed_sources", d.Bootstrap.AllowedSources, []string{}},
		{"breaker.enabled", d.Breaker.Enabled, true},
		{"breaker.failure_ratio", d.Breaker.FailureRatio, 0.5},
		{"retry.initial", d.Retry.Initial, 50 * time.Millisecond},
		{"retry.migration_limit", d.Retry.MigrationLimit, 1},
		{"admin.port", d.Admin.Port, 8001},
		{"metrics.enabled", d.Metrics.Enabled, true},
		{"policy.prefill", d.Policy.Prefill, "cache_aware"},
		{"policy.decode", d.Policy.Decode, "power_of_two"},
		{"policy.prefix_hash.prefix_bytes", d.Policy.PrefixHash.PrefixBytes, 1024},
		{"policy.prefix_hash.load_factor", d.Policy.PrefixHash.LoadFactor, 1.25},
		{"policy.consistent_hashing.header", d.Policy.ConsistentHashing.Header, "X-Session-ID"},
		{"policy.consistent_hashing.load_factor", d.Policy.ConsistentHashing.LoadFactor, 1.5},
		{"prefill", len(d.Prefill), 0},
		{"decode", len(d.Decode), 0},
	}
	for _, tt := range tests {
		if !reflect.DeepEqual(tt.got, tt.want) {
			t.Errorf("%s = %v, want %v", tt.key, tt.got, tt.want)
		}
	}
}

// The defaults are valid as soon as backends are added: nothing else is
// needed to run.
func TestDefaultValidWithBackends(t *testing.T) {
	c := Default()
	c.Prefill = []Prefill{{URL: "http://p:30000"}}
	c.Decode = []Decode{{URL: "http://d:30001"}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

// The env mapping compares underscore forms, so two keys must never share one.
func TestEnvNamesUnique(t *testing.T) {
	if len(envKeys) != len(leafKeys) {
		t.Fatalf("%d keys but %d env names: two keys share an underscore form", len(leafKeys), len(envKeys))
	}
}
