package config

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func validConfig() Config {
	c := Default()
	c.Prefill = []Prefill{{URL: "http://p:30000", BootstrapPort: intp(8998)}, {URL: "http://p2:30000", BootstrapPort: intp(8999)}}
	c.Decode = []Decode{{URL: "http://d:30001"}}
	return c
}

func intp(n int) *int { return &n }

// refusal is a change to validConfig that Validate must refuse with an
// *Error naming wantKey, its message containing wantMsg.
type refusal struct {
	name    string
	mutate  func(c *Config)
	wantKey string
	wantMsg string
}

// checkConfigError: err is an *Error naming wantKey, its message
// containing wantMsg.
func checkConfigError(t *testing.T, err error, wantKey, wantMsg string) {
	t.Helper()
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v (%T), want *config.Error", err, err)
	}
	if ce.Key != wantKey {
		t.Errorf("key = %q, want %q (%v)", ce.Key, wantKey, err)
	}
	if !strings.Contains(err.Error(), wantMsg) {
		t.Errorf("err = %q, want it to contain %q", err, wantMsg)
	}
}

func checkRefusals(t *testing.T, tests []refusal) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.mutate(&c)
			err := c.Validate()
			checkConfigError(t, err, tt.wantKey, tt.wantMsg)
			if !strings.HasPrefix(err.Error(), "config: "+tt.wantKey+": ") {
				t.Errorf("err = %q, want the form \"config: KEY: problem\"", err)
			}
		})
	}
}

// Empty backend lists are fine when engines may join at runtime: the
// admin API (on by default), etcd, or discovery of that role.
func TestEmptyBackendListsWhenEnginesMayJoin(t *testing.T) {
	for name, change := range map[string]func(*Config){
		"admin API": func(c *Config) { c.Admin.Port = 8001 },
		"etcd":      func(c *Config) { c.Admin.Port, c.Cluster.Etcd.Endpoints = 0, []string{"http://127.0.0.1:2379"} },
		"discovered": func(c *Config) {
			c.Admin.Port = 0
			c.Discovery.Kubernetes = Default().Discovery.Kubernetes
			c.Discovery.Kubernetes.Enabled, c.Discovery.Kubernetes.PrefillSelector, c.Discovery.Kubernetes.DecodeSelector = true, "r=p", "r=d"
		},
	} {
		c := validConfig()
		c.Prefill, c.Decode = nil, nil
		change(&c)
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestValidate(t *testing.T) {
	tests := []refusal{
		{"server port high", func(c *Config) { c.Server.Port = 70000 }, "server.port", "70000 out of range 1..65535"},
		{"server port zero", func(c *Config) { c.Server.Port = 0 }, "server.port", "out of range"},
		{"admin port high", func(c *Config) { c.Admin.Port = 65536 }, "admin.port", "out of range 0..65535"},
		{"admin port = server port", func(c *Config) { c.Admin.Port = 8000 }, "admin.port", "server.port"},
		{"bootstrap port high", func(c *Config) { c.Prefill[1].BootstrapPort = intp(70000) }, "prefill[1].bootstrap_port", "out of range"},
		{"bootstrap port zero", func(c *Config) { c.Prefill[0].BootstrapPort = intp(0) }, "prefill[0].bootstrap_port", "out of range"},
		{"url scheme", func(c *Config) { c.Prefill[0].URL = "ftp://p:1" }, "prefill[0].url", "must start with http://"},
		{"url no scheme", func(c *Config) { c.Decode[0].URL = "d:30001" }, "decode[0].url", "must start with http://"},
		{"url https duplicate", func(c *Config) {
			c.Decode = append(c.Decode, Decode{URL: "https://e"}, Decode{URL: "HTTPS://E:443/"})
		}, "decode[2].url", "duplicate backend"},
		{"url path", func(c *Config) { c.Decode[0].URL = "http://d:1/engine" }, "decode[0].url", "must not have a path"},
		{"url no host", func(c *Config) { c.Decode[0].URL = "http://" }, "decode[0].url", "no host"},
		{"url empty", func(c *Config) { c.Decode[0].URL = "" }, "decode[0].url", "required"},
		{"url unparsable", func(c *Config) { c.Decode[0].URL = "http://[::1" }, "decode[0].url", "not a URL"},
		{"url query", func(c *Config) { c.Decode[0].URL = "http://d:1/?x=1" }, "decode[0].url", "query"},
		{"duplicate prefill", func(c *Config) { c.Prefill[1].URL = "http://p:30000" }, "prefill[1].url", "duplicate backend http://p:30000 (also prefill[0].url)"},
		{"duplicate across pools", func(c *Config) { c.Decode[0].URL = "HTTP://P:30000/" }, "decode[0].url", "duplicate backend"},
		{"duplicate by default port", func(c *Config) {
			c.Decode = append(c.Decode, Decode{URL: "http://e"}, Decode{URL: "http://e:80"})
		}, "decode[2].url", "duplicate backend"},
		{"no prefill, none may join", func(c *Config) { c.Prefill, c.Admin.Port = nil, 0 }, "prefill", "at least one prefill"},
		{"no decode, none may join", func(c *Config) { c.Decode, c.Admin.Port = nil, 0 }, "decode", "at least one decode backend is required, unless some may join later"},
		{"no decode, only prefills discovered", func(c *Config) {
			c.Decode, c.Admin.Port = nil, 0
			c.Discovery.Kubernetes.Enabled, c.Discovery.Kubernetes.PrefillSelector = true, "role=prefill"
		}, "decode", "discovery.kubernetes.decode_selector"},
		{"log level", func(c *Config) { c.Log.Level = "verbose" }, "log.level", `"verbose" is not one of`},
		{"log format", func(c *Config) { c.Log.Format = "text" }, "log.format", "json, console"},
		{"bootstrap mode", func(c *Config) { c.Bootstrap.Mode = "remote" }, "bootstrap.mode", "embedded, external"},
		{"duplicate bootstrap port", func(c *Config) { c.Prefill[1].BootstrapPort = intp(8998) }, "prefill[1].bootstrap_port", "duplicate bootstrap port 8998"},
		{"nil bootstrap port is 8998", func(c *Config) { c.Prefill[1].BootstrapPort = nil }, "prefill[1].bootstrap_port", "duplicate bootstrap port 8998"},
		{"bootstrap port = server port", func(c *Config) { c.Prefill[0].BootstrapPort = intp(8000) }, "prefill[0].bootstrap_port", "server.port"},
		{"advertise host empty", func(c *Config) { c.Bootstrap.AdvertiseHost = "" }, "bootstrap.advertise_host", "required"},
		{"lookup attempts", func(c *Config) { c.Bootstrap.LookupAttempts = 0 }, "bootstrap.lookup_attempts", "at least 1"},
		{"allowed source not an IP", func(c *Config) { c.Bootstrap.AllowedSources = []string{"10.0.0.0/8", "prefill-1.example"} },
			"bootstrap.allowed_sources[1]", `"prefill-1.example" is not an IP address or a CIDR`},
		{"allowed source bad prefix length", func(c *Config) { c.Bootstrap.AllowedSources = []string{"10.0.0.0/33"} },
			"bootstrap.allowed_sources[0]", `"10.0.0.0/33" is not a CIDR`},
		{"allowed source empty", func(c *Config) { c.Bootstrap.AllowedSources = []string{""} }, "bootstrap.allowed_sources[0]", "not an IP address"},
		{"allowed source with zone", func(c *Config) { c.Bootstrap.AllowedSources = []string{"fe80::1%eth0"} }, "bootstrap.allowed_sources[0]", "zone"},
		{"allowed source checked in external mode too", func(c *Config) {
			c.Bootstrap.Mode, c.Bootstrap.AllowedSources = "external", []string{"10.0.0.0/8", "::1", "any"}
		}, "bootstrap.allowed_sources[2]", `"any"`},
		{"negative duration", func(c *Config) { c.Timeouts.DecodeIdle = -time.Second }, "timeouts.decode_idle", "-1s must not be negative"},
		{"negative limit", func(c *Config) { c.Limits.QueueSize = -1 }, "limits.queue_size", "must not be negative"},
		{"negative nested duration", func(c *Config) { c.Bootstrap.InfoWait = -1 }, "bootstrap.info_wait", "negative"},
		{"policy unknown", func(c *Config) { c.Policy.Prefill = "least_loaded" }, "policy.prefill", `"least_loaded" is not one of random, round_robin, power_of_two, cache_aware, prefix_hash, consistent_hashing`},
		{"decode policy unknown", func(c *Config) { c.Policy.Decode = "" }, "policy.decode", "is not one of"},
		{"prefix bytes zero", func(c *Config) { c.Policy.PrefixHash.PrefixBytes = 0 }, "policy.prefix_hash.prefix_bytes", "0 must be at least 1"},
		{"prefix bytes negative", func(c *Config) { c.Policy.PrefixHash.PrefixBytes = -1 }, "policy.prefix_hash.prefix_bytes", "must not be negative"},
		{"prefix load factor below 1", func(c *Config) { c.Policy.PrefixHash.LoadFactor = 0.9 }, "policy.prefix_hash.load_factor", "0.9 must be a number of at least 1"},
		{"prefix load factor NaN", func(c *Config) { c.Policy.PrefixHash.LoadFactor = math.NaN() }, "policy.prefix_hash.load_factor", "at least 1"},
		{"session load factor infinite", func(c *Config) { c.Policy.ConsistentHashing.LoadFactor = math.Inf(1) }, "policy.consistent_hashing.load_factor", "+Inf must be a number"},
		{"session header empty", func(c *Config) { c.Policy.ConsistentHashing.Header = "" }, "policy.consistent_hashing.header", `"" is not a header name`},
		{"session header with a colon", func(c *Config) { c.Policy.ConsistentHashing.Header = "X-Session-ID:" }, "policy.consistent_hashing.header", "not a header name"},
		{"breaker open timeout zero", func(c *Config) { c.Breaker.OpenTimeout = 0 }, "breaker.open_timeout", "positive"},
		{"health timeout zero", func(c *Config) { c.Health.Timeout = 0 }, "health.timeout", "positive"},
		{"dp rank ttl zero", func(c *Config) { c.Bootstrap.DPRankTTL = 0 }, "bootstrap.dp_rank_ttl", "positive"},
		{"poll interval zero", func(c *Config) { c.Bootstrap.Mode, c.Bootstrap.PollInterval = "external", 0 }, "bootstrap.poll_interval", "positive"},
		{"failure ratio high", func(c *Config) { c.Breaker.FailureRatio = 1.5 }, "breaker.failure_ratio", "out of range 0..1"},
		{"failure ratio negative", func(c *Config) { c.Breaker.FailureRatio = -0.1 }, "breaker.failure_ratio", "out of range"},
		{"failure ratio NaN", func(c *Config) { c.Breaker.FailureRatio = math.NaN() }, "breaker.failure_ratio", "out of range"},
		{"pair failures negative", func(c *Config) { c.Breaker.PairFailures = -1 }, "breaker.pair_failures", "negative"},
		{"pair window zero", func(c *Config) { c.Breaker.PairWindow = 0 }, "breaker.pair_window", "must be positive"},
		{"pair cooldown zero", func(c *Config) { c.Breaker.PairCooldown = 0 }, "breaker.pair_cooldown", "must be positive"},
		{"max attempts", func(c *Config) { c.Retry.MaxAttempts = 0 }, "retry.max_attempts", "at least 1"},
		{"migration limit negative", func(c *Config) { c.Retry.MigrationLimit = -1 }, "retry.migration_limit", "must not be negative"},
		{"abort timeout zero", func(c *Config) { c.Abort.Timeout = 0 }, "abort.timeout", "must be positive while abort.enabled is true"},
		{"abort max in flight zero", func(c *Config) { c.Abort.MaxInFlight = 0 }, "abort.max_in_flight", "0 must be at least 1"},
		{"abort max in flight negative", func(c *Config) { c.Abort.MaxInFlight = -1 }, "abort.max_in_flight", "must not be negative"},
		{"retry max below initial", func(c *Config) { c.Retry.Max = time.Millisecond }, "retry.max", "below retry.initial"},
		{"max body zero", func(c *Config) { c.Limits.MaxBodyBytes = 0 }, "limits.max_body_bytes", "must be positive"},
		{"max batch zero", func(c *Config) { c.Limits.MaxBatchSize = 0 }, "limits.max_batch_size", "must be at least 1"},
		{"health threshold", func(c *Config) { c.Health.FailThreshold = 0 }, "health.fail_threshold", "at least 1"},
	}
	checkRefusals(t, tests)
}

// Cases that look odd but are allowed, so the checks above are not too eager.
func TestValidateAccepts(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(c *Config)
	}{
		{"admin off", func(c *Config) { c.Admin.Port = 0 }},
		{"trailing slash", func(c *Config) { c.Decode[0].URL = "http://d.example/" }},
		{"shared bootstrap port in external mode", func(c *Config) {
			c.Bootstrap.Mode = "external"
			c.Prefill[0].BootstrapPort, c.Prefill[1].BootstrapPort = nil, nil
		}},
		{"one null bootstrap port", func(c *Config) { c.Prefill[0].BootstrapPort = nil }},
		{"ratio rule off", func(c *Config) { c.Breaker.FailureRatio = 0 }},
		{"health checks off", func(c *Config) { c.Health.Interval, c.Health.FailThreshold = 0, 0 }},
		{"aborts off, their bounds unset", func(c *Config) { c.Abort = Abort{} }},
		{"no concurrency cap", func(c *Config) { c.Limits.MaxConcurrentRequests = 0 }},
		{"allowed sources of every form", func(c *Config) {
			c.Bootstrap.AllowedSources = []string{"10.0.0.0/16", "10.1.0.5", "10.1.2.3/8", "::1", "fd00::/8", "::ffff:10.2.0.0/112", "0.0.0.0/0"}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.mutate(&c)
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestErrorOneLine(t *testing.T) {
	e := &Error{Key: "server", Problem: "line one\n  line two"}
	if got, want := e.Error(), "config: server: line one line two"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if got, want := (&Error{Problem: "no key"}).Error(), "config: no key"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}
