package config

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Validate checks values Load cannot judge alone: ranges, enums, URLs and
// conflicts between keys. It returns the first problem as *Error, in the
// order keys appear in config.yaml, so the answer is stable.
func (c *Config) Validate() error {
	if err := checkNonNegative(reflect.ValueOf(*c), ""); err != nil {
		return err
	}
	checks := []func() *Error{
		c.checkServer,
		c.checkServerTLS,
		c.checkBackends,
		c.checkUpstreamTLS,
		c.checkUpstreamAuth,
		c.checkLimits,
		c.checkLog,
		c.checkBootstrap,
		c.checkBreaker,
		c.checkRetry,
		c.checkAbort,
		c.checkHealth,
		c.checkAdmin,
		c.checkAdminTLS,
		c.checkPolicy,
		c.checkCacheAware,
		c.checkTracing,
		c.checkCluster,
		c.checkDiscovery,
	}
	for _, check := range checks {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// checkNonNegative refuses negative durations and counts anywhere in the
// tree; no field of Config gives a negative value a meaning.
func checkNonNegative(v reflect.Value, path string) *Error {
	t := v.Type()
	for i := range t.NumField() {
		f, fv := t.Field(i), v.Field(i)
		key := joinKey(path, f.Tag.Get("koanf"))
		switch {
		case f.Type.Kind() == reflect.Struct:
			if err := checkNonNegative(fv, key); err != nil {
				return err
			}
		case f.Type == durationType && fv.Int() < 0:
			return errorf(key, time.Duration(fv.Int()).String()+" must not be negative")
		case f.Type.Kind() == reflect.Int && fv.Int() < 0:
			return errorf(key, strconv.FormatInt(fv.Int(), 10)+" must not be negative")
		}
	}
	return nil
}

func checkPort(key string, port, low int) *Error {
	if port < low || port > 65535 {
		return errorf(key, fmt.Sprintf("%d out of range %d..65535", port, low))
	}
	return nil
}

func oneOf(key, val string, allowed ...string) *Error {
	if !slices.Contains(allowed, val) {
		return errorf(key, fmt.Sprintf("%q is not one of %s", val, strings.Join(allowed, ", ")))
	}
	return nil
}

func (c *Config) checkServer() *Error {
	return checkPort("server.port", c.Server.Port, 1)
}

func (c *Config) checkAdmin() *Error {
	if err := checkPort("admin.port", c.Admin.Port, 0); err != nil {
		return err
	}
	if c.Admin.Port != 0 && c.Admin.Port == c.Server.Port {
		return errorf("admin.port", fmt.Sprintf("%d is also server.port", c.Admin.Port))
	}
	return nil
}

// checkBackends validates URLs and refuses a backend listed twice, within or
// across the pools: one engine in two roles or twice in a pool would skew
// selection and corrupt the bootstrap rendezvous.
func (c *Config) checkBackends() *Error {
	seen := map[string]string{} // normalized URL -> key that first named it
	add := func(key, raw string) *Error {
		u, err := ParseBackendURL(raw)
		if err != nil {
			return errorf(key, err.Error())
		}
		norm := u.Key()
		if first, dup := seen[norm]; dup {
			return errorf(key, fmt.Sprintf("duplicate backend %s (also %s)", raw, first))
		}
		seen[norm] = key
		return nil
	}
	for i, p := range c.Prefill {
		if err := add(fmt.Sprintf("prefill[%d].url", i), p.URL); err != nil {
			return err
		}
		if p.BootstrapPort != nil {
			if err := checkPort(fmt.Sprintf("prefill[%d].bootstrap_port", i), *p.BootstrapPort, 1); err != nil {
				return err
			}
		}
	}
	for i, d := range c.Decode {
		if err := add(fmt.Sprintf("decode[%d].url", i), d.URL); err != nil {
			return err
		}
	}
	k := c.Discovery.Kubernetes
	if len(c.Prefill) == 0 && !c.backendsMayJoin(k.PrefillSelector) {
		return errorf("prefill", "at least one prefill backend is required, unless some may join later: through the admin API (admin.port), cluster.etcd or discovery.kubernetes.prefill_selector")
	}
	if len(c.Decode) == 0 && !c.backendsMayJoin(k.DecodeSelector) {
		return errorf("decode", "at least one decode backend is required, unless some may join later: through the admin API (admin.port), cluster.etcd or discovery.kubernetes.decode_selector")
	}
	return nil
}

// backendsMayJoin reports whether backends of a role whose discovery
// selector is selector can join at runtime, so that its list in the file
// may be empty (pdlb then starts not ready, and says why): an autoscaler
// or operator adds engines through POST /workers, replicas share theirs
// through etcd, pods are discovered.
func (c *Config) backendsMayJoin(selector string) bool {
	return c.Admin.Port > 0 || len(c.Cluster.Etcd.Endpoints) > 0 || c.Discovery.Kubernetes.Enabled && selector != ""
}

func (c *Config) checkLimits() *Error {
	if c.Limits.MaxBodyBytes <= 0 {
		return errorf("limits.max_body_bytes", fmt.Sprintf("%d must be positive", c.Limits.MaxBodyBytes))
	}
	if c.Limits.MaxBatchSize < 1 {
		return errorf("limits.max_batch_size", fmt.Sprintf("%d must be at least 1", c.Limits.MaxBatchSize))
	}
	return nil
}

func (c *Config) checkLog() *Error {
	if err := oneOf("log.level", c.Log.Level, "trace", "debug", "info", "warn", "error"); err != nil {
		return err
	}
	return oneOf("log.format", c.Log.Format, "json", "console")
}

func (c *Config) checkBootstrap() *Error {
	b := c.Bootstrap
	if err := oneOf("bootstrap.mode", b.Mode, "embedded", "external", "off"); err != nil {
		return err
	}
	for i, s := range b.AllowedSources {
		if _, err := ParseSource(s); err != nil {
			return errorf(fmt.Sprintf("bootstrap.allowed_sources[%d]", i), err.Error())
		}
	}
	if b.LookupAttempts < 1 {
		return errorf("bootstrap.lookup_attempts", fmt.Sprintf("%d must be at least 1", b.LookupAttempts))
	}
	if b.ForgetAfter > 0 && c.Health.Interval == 0 {
		return errorf("bootstrap.forget_after", "needs health checks (health.interval > 0): they decide that a prefill is gone")
	}
	if b.Mode == "external" && b.PollInterval <= 0 {
		return errorf("bootstrap.poll_interval", "must be positive in external mode")
	}
	if b.Mode != "embedded" {
		return nil
	}
	if b.DPRankTTL <= 0 {
		return errorf("bootstrap.dp_rank_ttl", "must be positive in embedded mode")
	}
	if b.AdvertiseHost == "" {
		return errorf("bootstrap.advertise_host", "required in embedded mode (engines must reach the registry)")
	}
	// In embedded mode each bootstrap port is one registry listener owned by
	// one prefill; a shared or clashing port would mix registrations or fail to bind.
	owner := map[int]string{c.Server.Port: "server.port"}
	if c.Admin.Port != 0 {
		owner[c.Admin.Port] = "admin.port"
	}
	for i, p := range c.Prefill {
		port := DefaultBootstrapPort
		if p.BootstrapPort != nil {
			port = *p.BootstrapPort
		}
		key := fmt.Sprintf("prefill[%d].bootstrap_port", i)
		if first, dup := owner[port]; dup {
			return errorf(key, fmt.Sprintf("duplicate bootstrap port %d (also %s; embedded mode needs one port per prefill)", port, first))
		}
		owner[port] = key
	}
	return nil
}

func (c *Config) checkBreaker() *Error {
	if c.Breaker.Enabled && c.Breaker.OpenTimeout <= 0 {
		return errorf("breaker.open_timeout", "must be positive while breakers are enabled")
	}
	r := c.Breaker.FailureRatio
	if math.IsNaN(r) || r < 0 || r > 1 {
		return errorf("breaker.failure_ratio", fmt.Sprintf("%v out of range 0..1", r))
	}
	b := &c.Breaker
	switch {
	case b.PairFailures < 0:
		return errorf("breaker.pair_failures", fmt.Sprintf("%d is negative (0 turns pair health off)", b.PairFailures))
	case b.PairFailures > 0 && b.PairWindow <= 0:
		return errorf("breaker.pair_window", "must be positive while breaker.pair_failures is set")
	case b.PairFailures > 0 && b.PairCooldown <= 0:
		return errorf("breaker.pair_cooldown", "must be positive while breaker.pair_failures is set")
	}
	return nil
}

func (c *Config) checkAbort() *Error {
	if !c.Abort.Enabled {
		return nil
	}
	if c.Abort.Timeout <= 0 {
		return errorf("abort.timeout", "must be positive while abort.enabled is true")
	}
	if c.Abort.MaxInFlight < 1 {
		return errorf("abort.max_in_flight", fmt.Sprintf("%d must be at least 1 while abort.enabled is true", c.Abort.MaxInFlight))
	}
	return nil
}

func (c *Config) checkRetry() *Error {
	if c.Retry.MaxAttempts < 1 {
		return errorf("retry.max_attempts", fmt.Sprintf("%d must be at least 1 (1 disables retries)", c.Retry.MaxAttempts))
	}
	if c.Retry.Max < c.Retry.Initial {
		return errorf("retry.max", fmt.Sprintf("%s is below retry.initial %s", c.Retry.Max, c.Retry.Initial))
	}
	if c.Retry.MigrationLimit < 0 {
		return errorf("retry.migration_limit", fmt.Sprintf("%d must not be negative (0 turns migration off)", c.Retry.MigrationLimit))
	}
	return nil
}

func (c *Config) checkHealth() *Error {
	h := c.Health
	if h.Interval == 0 {
		return nil
	}
	if h.FailThreshold < 1 {
		return errorf("health.fail_threshold", fmt.Sprintf("%d must be at least 1", h.FailThreshold))
	}
	if h.PassThreshold < 1 {
		return errorf("health.pass_threshold", fmt.Sprintf("%d must be at least 1", h.PassThreshold))
	}
	if h.Timeout <= 0 {
		return errorf("health.timeout", "must be positive while health checks are on")
	}
	return nil
}

// Policies are the selection policies a role may use (router/policy).
var Policies = []string{"random", "round_robin", "power_of_two", "cache_aware", "prefix_hash", "consistent_hashing"}

func (c *Config) checkPolicy() *Error {
	p := c.Policy
	if err := oneOf("policy.prefill", p.Prefill, Policies...); err != nil {
		return err
	}
	if err := oneOf("policy.decode", p.Decode, Policies...); err != nil {
		return err
	}
	if p.PrefixHash.PrefixBytes < 1 {
		return errorf("policy.prefix_hash.prefix_bytes", fmt.Sprintf("%d must be at least 1", p.PrefixHash.PrefixBytes))
	}
	if err := checkLoadFactor("policy.prefix_hash.load_factor", p.PrefixHash.LoadFactor); err != nil {
		return err
	}
	if !isToken(p.ConsistentHashing.Header) {
		return errorf("policy.consistent_hashing.header", fmt.Sprintf("%q is not a header name", p.ConsistentHashing.Header))
	}
	return checkLoadFactor("policy.consistent_hashing.load_factor", p.ConsistentHashing.LoadFactor)
}

// checkLoadFactor refuses a bound below 1: below the mean load no backend
// could take a request.
func checkLoadFactor(key string, f float64) *Error {
	if math.IsNaN(f) || math.IsInf(f, 0) || f < 1 {
		return errorf(key, fmt.Sprintf("%v must be a number of at least 1", f))
	}
	return nil
}

// isToken reports whether s is an HTTP token (RFC 9110), as header names are.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		ok := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
		if !ok {
			return false
		}
	}
	return true
}
