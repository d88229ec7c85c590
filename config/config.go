// Package config holds pdlb's configuration: the struct every other package
// reads, its defaults, loading (YAML file → PDLB_* environment → flags) and
// validation with errors that name the offending key.
package config

import "time"

// Config is the whole of pdlb's configuration. Every field documents its
// default; Default() is the one place defaults are set.
type Config struct {
	Server    Server    `koanf:"server"`
	Prefill   []Prefill `koanf:"prefill"`
	Decode    []Decode  `koanf:"decode"`
	Timeouts  Timeouts  `koanf:"timeouts"`
	Limits    Limits    `koanf:"limits"`
	Log       Log       `koanf:"log"`
	Bootstrap Bootstrap `koanf:"bootstrap"`
	Breaker   Breaker   `koanf:"breaker"`
	Retry     Retry     `koanf:"retry"`
	Abort     Abort     `koanf:"abort"`
	Health    Health    `koanf:"health"`
	Admin     Admin     `koanf:"admin"`
	Metrics   Metrics   `koanf:"metrics"`
	Policy    Policy    `koanf:"policy"`
	Tracing   Tracing   `koanf:"tracing"`
	Cluster   Cluster   `koanf:"cluster"`
	Discovery Discovery `koanf:"discovery"`

	// UpstreamTLS is how pdlb speaks to https:// backends.
	UpstreamTLS UpstreamTLS `koanf:"upstream_tls"`
	// UpstreamAuth is the credentials pdlb presents to engines.
	UpstreamAuth UpstreamAuth `koanf:"upstream_auth"`
}

// Server is the client-facing listener.
type Server struct {
	// Host to listen on. Default "0.0.0.0".
	Host string `koanf:"host"`
	// Port to listen on. Default 8000.
	Port int `koanf:"port"`
	// ReadTimeout bounds reading one request (headers and body). Default 60s.
	ReadTimeout time.Duration `koanf:"read_timeout"`
	// WriteTimeout bounds each write to the client (renewed per streamed event). Default 60s.
	WriteTimeout time.Duration `koanf:"write_timeout"`
	// IdleTimeout closes keep-alive client connections idle this long. Default 120s.
	IdleTimeout time.Duration `koanf:"idle_timeout"`
	// MaxHeaderBytes caps the request header size; it is also each client
	// connection's read buffer, held for the life of a stream. Default 8192.
	MaxHeaderBytes int `koanf:"max_header_bytes"`
	// APIKey, when set, requires "Authorization: Bearer <key>" on serving routes. Default "" (off).
	APIKey string `koanf:"api_key"`
	// ShutdownGrace is how long in-flight requests may finish after SIGTERM. Default 30s.
	ShutdownGrace time.Duration `koanf:"shutdown_grace"`
	// TLS serves the listener over TLS when its cert_file is set.
	TLS ListenerTLS `koanf:"tls"`
}

// ListenerTLS serves a listener over TLS (1.2 or later, Go's default
// cipher suites, HTTP/1.1). The files are read again on SIGHUP, on a
// reload and when they change on disk; new handshakes get the new ones,
// open connections keep theirs.
type ListenerTLS struct {
	// CertFile is the PEM certificate chain, leaf first; set, the listener
	// speaks TLS only. Default "" (plain HTTP).
	CertFile string `koanf:"cert_file"`
	// KeyFile is the PEM private key of CertFile's leaf. Default "".
	KeyFile string `koanf:"key_file"`
	// ClientCAFile, when set, requires every client to present a
	// certificate signed by one of its PEM CAs (mTLS). Default "".
	ClientCAFile string `koanf:"client_ca_file"`
}

// Enabled reports whether the listener speaks TLS.
func (t ListenerTLS) Enabled() bool { return t.CertFile != "" }

// UpstreamTLS is the client side of TLS to https:// backends (engines'
// HTTP servers). http:// backends and the bootstrap registries stay plain.
type UpstreamTLS struct {
	// CAFile is the PEM CAs that sign the engines' certificates; empty
	// trusts the system's pool. Default "".
	CAFile string `koanf:"ca_file"`
	// CertFile is pdlb's client certificate (PEM chain) for engines that
	// require one (mTLS); with KeyFile. Default "".
	CertFile string `koanf:"cert_file"`
	// KeyFile is the PEM private key of CertFile's leaf. Default "".
	KeyFile string `koanf:"key_file"`
	// InsecureSkipVerify accepts any engine certificate, unverified: for a
	// test bench only; pdlb logs a warning at every start and reload.
	// Default false.
	InsecureSkipVerify bool `koanf:"insecure_skip_verify"`
}

// UpstreamAuth is the credentials pdlb presents to engines started with
// SGLang's --api-key or --admin-api-key (every engine the same, as
// SGLang's own balancer and gateway expect). The client's own
// Authorization header is never passed to an engine.
type UpstreamAuth struct {
	// APIKey is the engines' --api-key, sent as "Authorization: Bearer
	// <key>" on every leg and call but /health* (which SGLang leaves open).
	// Default "" (none sent).
	APIKey string `koanf:"api_key"`
	// AdminAPIKey is the engines' --admin-api-key, sent instead of api_key
	// on the aborts pdlb sends (/abort_request is an admin route in SGLang)
	// and the admin listener's POST /flush_cache; never lent to a client's
	// request (the serving listener's /flush_cache goes with api_key).
	// Default "" (api_key is sent there).
	AdminAPIKey string `koanf:"admin_api_key"`
}

// Prefill is one prefill engine.
type Prefill struct {
	// URL of the engine's HTTP server, e.g. "http://10.0.0.1:30000". Required.
	URL string `koanf:"url"`
	// BootstrapPort is the KV bootstrap port; nil means JSON null (the decode
	// uses its own default). Default nil.
	BootstrapPort *int `koanf:"bootstrap_port"`
}

// Decode is one decode engine.
type Decode struct {
	// URL of the engine's HTTP server. Required.
	URL string `koanf:"url"`
}

// Timeouts bound each leg of a request.
type Timeouts struct {
	// Connect bounds dialing a backend: the TCP connect and, for https://,
	// the TLS handshake together; a leg's own deadline (first byte,
	// request) cuts a dial short too. Default 3s.
	Connect time.Duration `koanf:"connect"`
	// PrefillFirstByte bounds the wait for the prefill's response headers. Default 300s.
	PrefillFirstByte time.Duration `koanf:"prefill_first_byte"`
	// DecodeFirstByte bounds the wait for the decode's first byte (the whole
	// answer for non-streaming requests, the first event for streams). Default 600s.
	DecodeFirstByte time.Duration `koanf:"decode_first_byte"`
	// DecodeIdle bounds the gap between two stream chunks from the decode. Default 60s.
	DecodeIdle time.Duration `koanf:"decode_idle"`
	// Request bounds the whole request, streams included. Default 1800s.
	Request time.Duration `koanf:"request"`
}

// Limits protect pdlb and the backends.
type Limits struct {
	// MaxBodyBytes is the largest accepted request body. Default 67108864 (64 MiB).
	MaxBodyBytes int `koanf:"max_body_bytes"`
	// MaxBatchSize is the most items one /generate batch (a "text" list or
	// an "input_ids" list of lists) may hold; more is a 400. pdlb writes a
	// bootstrap host, port and room per item for each leg, so this bounds
	// what a small body of many tiny items can cost. Default 1024.
	MaxBatchSize int `koanf:"max_batch_size"`
	// MaxConcurrentRequests caps requests in flight; 0 means no cap. Default 0.
	MaxConcurrentRequests int `koanf:"max_concurrent_requests"`
	// QueueSize is how many requests may wait for a slot when the cap is reached. Default 100.
	QueueSize int `koanf:"queue_size"`
	// QueueTimeout bounds the wait in that queue. Default 30s.
	QueueTimeout time.Duration `koanf:"queue_timeout"`
}

// Log configures zerolog.
type Log struct {
	// Level: trace, debug, info, warn, error. Default "info".
	Level string `koanf:"level"`
	// Format: "json" or "console". Default "json".
	Format string `koanf:"format"`
}

// Bootstrap configures the KV bootstrap registry.
type Bootstrap struct {
	// Mode: "embedded" (pdlb serves the registry on every prefill bootstrap_port),
	// "external" (prefills run their own; pdlb polls them) or "off" (no
	// registry: prefills are never gated on registration and DP ranks are not
	// checked; for engines without SGLang's bootstrap server). Default "embedded".
	Mode string `koanf:"mode"`
	// AdvertiseHost is the host engines reach pdlb's registry on; injected as
	// bootstrap_host in embedded mode. Default "127.0.0.1".
	AdvertiseHost string `koanf:"advertise_host"`
	// ListenHost is the address the embedded registry binds. Default "0.0.0.0".
	ListenHost string `koanf:"listen_host"`
	// AuthToken, when set, requires "Authorization: Bearer <token>" on registry writes. Default "".
	AuthToken string `koanf:"auth_token"`
	// AllowedSources lists the networks, as CIDRs ("10.0.0.0/16"; a bare IP
	// is one host), whose peers may write to the embedded registry (PUT
	// /route, POST /register_dp_rank, DELETE /route); a write from any other
	// TCP peer is refused with 403. Every prefill rank host registers and
	// reports DP ranks, so list them all. Empty lets any source write, as
	// SGLang's own server does; then a rank may not move to another rank_ip
	// and DELETE /route is taken from loopback only, unless AuthToken is set.
	// From the environment or --set: comma-separated. Default [] (any source).
	AllowedSources []string `koanf:"allowed_sources"`
	// ExtendedSentinel forces all 15 keys of today's PrefillServerInfo into the
	// sentinel answer. When false, the answer follows the prefill's SGLang
	// era: all 15 when its first rank to register sent
	// enable_dsa_cache_layer_split or prefill_http_port (SGLang since
	// 2026-07-09, whose decodes need them), else the 7 base keys, since
	// decodes from 2026-02-28 to 07-08 reject keys they do not know. Default false.
	ExtendedSentinel bool `koanf:"extended_sentinel"`
	// DPRankTTL is how long /register_dp_rank entries live. Default 120s.
	DPRankTTL time.Duration `koanf:"dp_rank_ttl"`
	// InfoWait bounds the slow path that waits for a prefill's parallel info; 0 means no wait. Default 5s.
	InfoWait time.Duration `koanf:"info_wait"`
	// PollInterval is how often external mode polls a registry that is not ready yet. Default 1s.
	PollInterval time.Duration `koanf:"poll_interval"`
	// LookupAttempts and LookupInterval bound the lookup client's retries of
	// 503 "not ready" answers (the decodes of `pdlb demo` and `pdlb mock`;
	// `pdlb serve` polls registries instead, poll_interval). Default 20 × 1s.
	LookupAttempts int           `koanf:"lookup_attempts"`
	LookupInterval time.Duration `koanf:"lookup_interval"`
	// ForgetAfter resets a prefill's embedded registry namespace (as DELETE
	// /route does) once its health checks have failed without a pass for
	// this long, on this pdlb and, with cluster.etcd, on every live
	// replica; a prefill restarted after that may then register another
	// topology. Stock SGLang prefills register only at start-up, so one
	// that was merely unreachable this long stays unregistered until it
	// restarts: set it above the longest outage a prefill survives without
	// restarting. Needs health.interval > 0; 0 never forgets. Default 0.
	ForgetAfter time.Duration `koanf:"forget_after"`
}

// Breaker configures one circuit breaker per backend.
type Breaker struct {
	// Enabled turns breakers on. Default true.
	Enabled bool `koanf:"enabled"`
	// ConsecutiveFailures trips the breaker after this many failures in a row (0 = rule off). Default 5.
	ConsecutiveFailures uint32 `koanf:"consecutive_failures"`
	// FailureRatio trips the breaker when failures/requests in the window reach it (0 = rule off). Default 0.5.
	FailureRatio float64 `koanf:"failure_ratio"`
	// MinRequests is the least number of requests in the window before FailureRatio applies. Default 20.
	MinRequests uint32 `koanf:"min_requests"`
	// Window is the rolling window for the ratio rule. Default 60s.
	Window time.Duration `koanf:"window"`
	// OpenTimeout is how long an open breaker refuses before going half-open. Default 30s.
	OpenTimeout time.Duration `koanf:"open_timeout"`
	// HalfOpenMaxRequests bounds the probes admitted while half-open. Default 1.
	HalfOpenMaxRequests uint32 `koanf:"half_open_max_requests"`
	// PairFailures avoids a prefill–decode pair after this many failures
	// of that pairing (the decode's KV-transfer errors naming it) within
	// PairWindow, for PairCooldown; 0 turns pair health off. Default 3.
	// Works whether or not breakers are enabled.
	PairFailures int `koanf:"pair_failures"`
	// PairWindow is how far back pair failures count. Default 60s.
	PairWindow time.Duration `koanf:"pair_window"`
	// PairCooldown is how long a failing pair is avoided. Default 60s.
	PairCooldown time.Duration `koanf:"pair_cooldown"`
}

// Retry configures retries before the first byte reached the client.
type Retry struct {
	// MaxAttempts counts every attempt, the first included; 1 disables retries. Default 3.
	MaxAttempts int `koanf:"max_attempts"`
	// Initial backoff before the second attempt. Default 50ms.
	Initial time.Duration `koanf:"initial"`
	// Max caps the backoff. Default 2s.
	Max time.Duration `koanf:"max"`
	// MigrationLimit is how often one /generate stream that broke after
	// events reached the client may be continued on a fresh pair (prompt
	// plus the tokens sent so far); 0 turns migration off. Default 1.
	MigrationLimit int `koanf:"migration_limit"`
}

// Abort configures engine-level aborts: each leg carries a rid, and when a
// request fails or its client leaves pdlb sends SGLang's POST
// /abort_request {"rid": …} to the engines still working on it.
type Abort struct {
	// Enabled injects the rid and sends the aborts; false leaves bodies
	// without a rid and engines to notice closed connections. Default true.
	Enabled bool `koanf:"enabled"`
	// Timeout bounds one abort request (SGLang answers at once). Default 2s.
	Timeout time.Duration `koanf:"timeout"`
	// MaxInFlight caps the rids being aborted at once (one request each; a
	// batch has one per item); a leg whose aborts would go over is not
	// aborted, and its rids are counted as dropped. Default 256.
	MaxInFlight int `koanf:"max_in_flight"`
}

// Health configures active health checks (GET /health on every backend).
type Health struct {
	// Interval between checks; 0 disables active checks. Default 5s.
	Interval time.Duration `koanf:"interval"`
	// Timeout of one check. Default 2s.
	Timeout time.Duration `koanf:"timeout"`
	// FailThreshold consecutive failures mark a backend unhealthy. Default 3.
	FailThreshold int `koanf:"fail_threshold"`
	// PassThreshold consecutive successes mark it healthy again. Default 2.
	PassThreshold int `koanf:"pass_threshold"`
}

// Admin is the operator listener (/workers, pprof).
type Admin struct {
	// Host to listen on. Default "127.0.0.1".
	Host string `koanf:"host"`
	// Port of the admin listener; 0 disables it. Default 8001.
	Port int `koanf:"port"`
	// APIKey, when set, requires "Authorization: Bearer <key>". Default "".
	APIKey string `koanf:"api_key"`
	// TLS serves the admin listener over TLS, as server.tls does.
	TLS ListenerTLS `koanf:"tls"`
}

// Metrics configures Prometheus exposition.
type Metrics struct {
	// Enabled serves /metrics on the serving port. Default true.
	Enabled bool `koanf:"enabled"`
}

// Policy chooses the prefill and the decode of each request.
type Policy struct {
	// Prefill is the prefill policy: random, round_robin, power_of_two,
	// cache_aware, prefix_hash or consistent_hashing. cache_aware won on
	// the simulator (bench/POLICIES.md): it follows prefixes, and under no
	// sharing it balances like power_of_two. With several pdlb replicas,
	// prefix_hash. Default "cache_aware".
	Prefill string `koanf:"prefill"`
	// Decode is the decode policy, from the same list; it sees the prefill
	// chosen for the request. A decode has no prefix to reuse (its KV comes
	// from the prefill), so load decides. Default "power_of_two".
	Decode string `koanf:"decode"`
	// DPAware also picks the least-loaded data-parallel rank of an engine
	// with dp_size > 1 (a prefill's from its registry, a decode's from its
	// /server_info, learnt by the health checks): the prefill gets
	// routed_dp_rank, the decode disagg_prefill_dp_rank (and its own
	// routed_dp_rank when it is DP), and the room keeps room % dp_size ==
	// rank. A client's explicit rank always wins. Default false.
	DPAware bool `koanf:"dp_aware"`
	// PrefixHash tunes the prefix_hash policy.
	PrefixHash PrefixHash `koanf:"prefix_hash"`
	// ConsistentHashing tunes the consistent_hashing policy.
	ConsistentHashing ConsistentHashing `koanf:"consistent_hashing"`
	// CacheAware holds the parameters of the cache_aware policy.
	CacheAware CacheAware `koanf:"cache_aware"`
	// PowerOfTwo tunes the power_of_two policy.
	PowerOfTwo PowerOfTwo `koanf:"power_of_two"`
}

// PowerOfTwo tunes power_of_two.
type PowerOfTwo struct {
	// EngineLoad also reads each backend's own load (SGLang's GET /v1/loads,
	// else /get_load: its running and waiting requests) on every health
	// check, and compares the larger of that and pdlb's in-flight count:
	// the engine sees requests from other balancers or pdlb replicas that
	// pdlb's count misses, at the price of a GET per backend per health
	// interval and a view as old as that interval. Default false.
	EngineLoad bool `koanf:"engine_load"`
}

// PrefixHash tunes prefix_hash: the first bytes of a request's prompt pick
// its backend by rendezvous hashing, so prompts that begin alike meet on one
// backend and its prefix cache, and every pdlb replica agrees where.
type PrefixHash struct {
	// PrefixBytes is how many bytes of the prompt, as its raw JSON, make the
	// key; a shorter prompt is hashed whole. About SGLang's 256 tokens of
	// text at ~4 bytes a token: long enough to tell system prompts and
	// templates apart, and every later turn of a conversation begins with
	// the same bytes. Default 1024.
	PrefixBytes int `koanf:"prefix_bytes"`
	// LoadFactor bounds what a key's backend may take: a backend takes a
	// key only while its requests in flight are below ceil(load_factor ×
	// (in flight over the available backends + 1) ÷ available backends),
	// else the key goes to its next backend in hash order (consistent
	// hashing with bounded loads, Mirrokni, Thorup and Zadimoghaddam). At
	// least 1 (strict balance); 1.25 is SGLang's prefix_hash default too.
	// Default 1.25.
	LoadFactor float64 `koanf:"load_factor"`
}

// ConsistentHashing tunes consistent_hashing: a routing key sent by the
// client picks the backend by rendezvous hashing (a session sticks to one).
type ConsistentHashing struct {
	// Header names the request header that carries the routing key; a
	// request without it goes to the less loaded of two random backends.
	// Default "X-Session-ID".
	Header string `koanf:"header"`
	// LoadFactor bounds a backend's share as prefix_hash.load_factor does.
	// At least 1. Looser than prefix_hash's because moving a session
	// forfeits its whole conversation's cache, not one shared prefix
	// (SGLang's bounded consistent hashing allows 1.5 too). Default 1.5.
	LoadFactor float64 `koanf:"load_factor"`
}

// CacheAware tunes the cache_aware policy: a prefix tree of the prompts
// sent to each backend, to send a request where its prefix is likely
// cached, unless that backend is overloaded. The defaults start from
// SGLang's cache_aware and are to be revised by simulation.
type CacheAware struct {
	// MatchThreshold is the share of the prompt (0..1) the best-matching
	// backend must hold for the request to follow it; below it the least
	// loaded backend takes the request, so new prefixes spread. SGLang's
	// cache_threshold. Default 0.3.
	MatchThreshold float64 `koanf:"match_threshold"`
	// BalanceAbsThreshold and BalanceRelThreshold define an overloaded
	// backend: in flight more than the mean of the available backends plus
	// BalanceAbsThreshold AND more than BalanceRelThreshold times the least
	// loaded one. Overloaded backends are left out of the choice; the
	// others keep their affinity. On the simulator's chat sessions, 32 above
	// the mean (SGLang's 64 between two backends) let one engine take twice the mean work
	// (the sessions of the most popular system prompt followed it); 4 kept
	// the busiest within 1.3× of the mean at the same hit rate
	// (bench/POLICIES.md). Default 4.
	BalanceAbsThreshold int `koanf:"balance_abs_threshold"`
	// BalanceRelThreshold: see BalanceAbsThreshold; at least 1. SGLang's
	// balance_rel_threshold. Default 1.5.
	BalanceRelThreshold float64 `koanf:"balance_rel_threshold"`
	// MaxTreeBytes caps the memory of the tree of each role using the
	// policy (at least 65536); over it, the backend holding the most gives
	// up its least recently used prefixes. At 8 bytes per 64-byte block it
	// tracks up to about 256 MB of prompt text (64M tokens), more than the
	// KV caches of dozens of engines hold. Default 33554432 (32 MiB).
	MaxTreeBytes int `koanf:"max_tree_bytes"`
	// BlockBytes is the granularity of matching: prompts (their raw JSON:
	// text, input_ids, messages) are compared in blocks of this many bytes
	// from the start, and a prompt shorter than one block never matches.
	// 64 bytes is about 16 tokens of text, 10 of input_ids. 16..4096.
	// Default 64.
	BlockBytes int `koanf:"block_bytes"`
}

// Tracing configures OpenTelemetry traces, exported over OTLP/HTTP. The
// exporter also reads the standard OTEL_EXPORTER_OTLP_* variables; a key
// set here takes precedence over its OTEL_ counterpart. Read at start only.
type Tracing struct {
	// Enabled turns tracing on; off, the request path does no tracing work
	// at all. Default false.
	Enabled bool `koanf:"enabled"`
	// Endpoint is the collector's OTLP/HTTP base URL, read as
	// OTEL_EXPORTER_OTLP_ENDPOINT is ("http://collector:4318"; spans go to
	// its path + /v1/traces). Empty leaves OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
	// or OTEL_EXPORTER_OTLP_ENDPOINT in force, else http://localhost:4318. Default "".
	Endpoint string `koanf:"endpoint"`
	// SampleRatio is the share (0..1) of the requests that start a trace
	// here which are sampled; a request that arrives with a W3C traceparent
	// follows its sampled flag (parent-based sampling). It replaces
	// OTEL_TRACES_SAMPLER. Default 1.
	SampleRatio float64 `koanf:"sample_ratio"`
	// ServiceName is the service.name resource attribute; it replaces
	// OTEL_SERVICE_NAME (OTEL_RESOURCE_ATTRIBUTES adds others). Default "pdlb".
	ServiceName string `koanf:"service_name"`
	// Headers are sent with every export (an API key, say). When not empty
	// they replace OTEL_EXPORTER_OTLP_HEADERS. From the environment or
	// --set: "name=value,name2=value2". Default {}.
	Headers map[string]string `koanf:"headers"`
}

// Cluster lets several pdlb replicas share the embedded registry and the
// workers added through the admin API.
type Cluster struct {
	// Etcd is where the shared state lives.
	Etcd Etcd `koanf:"etcd"`
}

// Etcd configures the etcd cluster replicas share their state through.
// With no endpoints pdlb is one instance and never contacts etcd.
type Etcd struct {
	// Endpoints are the etcd members' client URLs ("http://10.0.0.5:2379",
	// https for TLS); empty means one instance, state in memory. From the
	// environment or --set: comma-separated. Default [] (no etcd).
	Endpoints []string `koanf:"endpoints"`
	// Prefix is put in front of every key pdlb writes, so several pdlb
	// clusters (or other users) can share one etcd. Default "/pdlb/".
	Prefix string `koanf:"prefix"`
	// DialTimeout bounds connecting to an etcd member. Default 5s.
	DialTimeout time.Duration `koanf:"dial_timeout"`
	// RequestTimeout bounds one write (a registration, an admin change)
	// before its client gets a 503. Default 3s.
	RequestTimeout time.Duration `koanf:"request_timeout"`
	// LeaseTTL is how long a replica that stopped talking to etcd still
	// counts as live (for bootstrap.forget_after's vote); at least 2s.
	// Default 10s.
	LeaseTTL time.Duration `koanf:"lease_ttl"`
	// Username authenticates to etcd (its auth enabled); empty: no
	// authentication. Default "".
	Username string `koanf:"username"`
	// Password goes with Username. Default "".
	Password string `koanf:"password"`
	// CAFile verifies the members' certificates (PEM); empty: the system's
	// roots. Default "".
	CAFile string `koanf:"ca_file"`
	// CertFile is this replica's client certificate (PEM), for members
	// that require one; with KeyFile, or neither. Default "".
	CertFile string `koanf:"cert_file"`
	// KeyFile is CertFile's private key (PEM). Default "".
	KeyFile string `koanf:"key_file"`
}

// Discovery finds backends at runtime, besides the prefill and decode
// lists above (both kinds serve side by side).
type Discovery struct {
	// Kubernetes watches Pods through the Kubernetes API.
	Kubernetes Kubernetes `koanf:"kubernetes"`
}

// Kubernetes discovers prefill and decode pods by label: a pod that is
// Ready joins its role; one that is deleted, turns not Ready or loses its
// role's labels drains (its requests finish) and leaves. Read at start
// only.
type Kubernetes struct {
	// Enabled turns discovery on. Default false.
	Enabled bool `koanf:"enabled"`
	// Kubeconfig is a kubeconfig file for running outside the cluster;
	// empty uses the pod's service account (in-cluster). Default "".
	Kubeconfig string `koanf:"kubeconfig"`
	// Namespace whose pods are watched; empty is pdlb's own (its service
	// account's namespace, or the kubeconfig context's); "*" watches every
	// namespace (RBAC: a ClusterRole). Default "".
	Namespace string `koanf:"namespace"`
	// PrefillSelector is the label selector of prefill pods, as kubectl
	// -l takes it ("app=sglang,role=prefill"); empty discovers no
	// prefill. Default "".
	PrefillSelector string `koanf:"prefill_selector"`
	// DecodeSelector is the label selector of decode pods; empty
	// discovers no decode. Default "".
	DecodeSelector string `koanf:"decode_selector"`
	// HTTPPortName is the name of the container port the engine serves
	// HTTP on. Default "http".
	HTTPPortName string `koanf:"http_port_name"`
	// HTTPPortAnnotation, on a pod, gives its HTTP port as a number and
	// wins over the named port. Default "sglang.ai/http-port".
	HTTPPortAnnotation string `koanf:"http_port_annotation"`
	// BootstrapPortAnnotation, on a prefill pod, gives its KV bootstrap
	// port; a prefill without it has a null bootstrap port (the decode's
	// default, 8998). Default "sglang.ai/bootstrap-port".
	BootstrapPortAnnotation string `koanf:"bootstrap_port_annotation"`
}
