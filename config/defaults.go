package config

import "time"

// DefaultBootstrapPort is the KV bootstrap port SGLang engines use when a
// prefill's bootstrap_port is null; embedded mode listens on it for such prefills.
const DefaultBootstrapPort = 8998

// Default returns the built-in configuration. It is the one place defaults
// are set; the doc comments in config.go and the comments in config.yaml
// state the same values (tests hold them together).
func Default() Config {
	return Config{
		Server: Server{
			Host:           "0.0.0.0",
			Port:           8000,
			ReadTimeout:    60 * time.Second,
			WriteTimeout:   60 * time.Second,
			IdleTimeout:    120 * time.Second,
			MaxHeaderBytes: 8192,
			ShutdownGrace:  30 * time.Second,
		},
		Timeouts: Timeouts{
			Connect:          3 * time.Second,
			PrefillFirstByte: 300 * time.Second,
			DecodeFirstByte:  600 * time.Second,
			DecodeIdle:       60 * time.Second,
			Request:          1800 * time.Second,
		},
		Limits: Limits{
			MaxBodyBytes: 64 << 20,
			MaxBatchSize: 1024,
			QueueSize:    100,
			QueueTimeout: 30 * time.Second,
		},
		Log: Log{Level: "info", Format: "json"},
		Bootstrap: Bootstrap{
			Mode:           "embedded",
			AdvertiseHost:  "127.0.0.1",
			ListenHost:     "0.0.0.0",
			AllowedSources: []string{},
			DPRankTTL:      120 * time.Second,
			InfoWait:       5 * time.Second,
			PollInterval:   time.Second,
			LookupAttempts: 20,
			LookupInterval: time.Second,
		},
		Breaker: Breaker{
			Enabled:             true,
			ConsecutiveFailures: 5,
			FailureRatio:        0.5,
			MinRequests:         20,
			Window:              60 * time.Second,
			OpenTimeout:         30 * time.Second,
			HalfOpenMaxRequests: 1,
			PairFailures:        3,
			PairWindow:          60 * time.Second,
			PairCooldown:        60 * time.Second,
		},
		Retry: Retry{
			MaxAttempts:    3,
			Initial:        50 * time.Millisecond,
			Max:            2 * time.Second,
			MigrationLimit: 1,
		},
		Abort: Abort{Enabled: true, Timeout: 2 * time.Second, MaxInFlight: 256},
		Health: Health{
			Interval:      5 * time.Second,
			Timeout:       2 * time.Second,
			FailThreshold: 3,
			PassThreshold: 2,
		},
		Admin:   Admin{Host: "127.0.0.1", Port: 8001},
		Metrics: Metrics{Enabled: true},
		Policy: Policy{
			Prefill:           "cache_aware",
			Decode:            "power_of_two",
			PrefixHash:        PrefixHash{PrefixBytes: 1024, LoadFactor: 1.25},
			ConsistentHashing: ConsistentHashing{Header: "X-Session-ID", LoadFactor: 1.5},
			CacheAware: CacheAware{
				MatchThreshold:      0.3,
				BalanceAbsThreshold: 4,
				BalanceRelThreshold: 1.5,
				MaxTreeBytes:        32 << 20,
				BlockBytes:          64,
			},
		},
		Tracing: Tracing{SampleRatio: 1, ServiceName: "pdlb", Headers: map[string]string{}},
		Cluster: Cluster{Etcd: Etcd{
			Endpoints:      []string{},
			Prefix:         "/pdlb/",
			DialTimeout:    5 * time.Second,
			RequestTimeout: 3 * time.Second,
			LeaseTTL:       10 * time.Second,
		}},
		Discovery: Discovery{Kubernetes: Kubernetes{
			HTTPPortName:            "http",
			HTTPPortAnnotation:      "sglang.ai/http-port",
			BootstrapPortAnnotation: "sglang.ai/bootstrap-port",
		}},
	}
}
