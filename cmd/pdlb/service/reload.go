package service

import (
	"reflect"
	"slices"

	"pdlb/config"
	"pdlb/proxy"
	"pdlb/router"
)

// Apply swaps in a new, validated config without dropping in-flight
// requests: settings and timeouts apply to new requests, new backends join,
// removed ones drain, breakers are rebuilt when their settings changed.
// Listener addresses and the registry mode need a restart.
func (s *Service) Apply(cfg *config.Config) error {
	removed, moved, err := s.applyLocked(cfg)
	// Drained outside s.mu: the admin API takes its own lock before building
	// backends under s.mu, so the two locks are always taken in that order.
	for _, bs := range moved {
		s.reg.retire(bs, s.Pool)
	}
	for _, b := range removed {
		s.admin.Drain(b)
		s.log.Info().Str("role", b.Role.String()).Str("url", b.URL).Msg("reload: backend removed, draining")
	}
	return err
}

// applyLocked applies cfg under s.mu and returns the backends to drain and
// the rendezvous that prefills moved away from (a changed bootstrap_port).
// It applies all of cfg or nothing: when a step fails (a new registry port
// cannot be bound), what the reload changed so far is undone and the
// running configuration stays in force, as the caller's log line says.
func (s *Service) applyLocked(cfg *config.Config) (removed []*proxy.Backend, moved []proxy.Bootstrap, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.cfg
	if kept := keepStartupOnly(old, cfg); len(kept) > 0 {
		s.log.Warn().Strs("keys", kept).Msg("reload: these keys are read at start only; they keep their running values until a restart")
	}
	// Certificates are read first and put in force last: a bad pair
	// rejects the whole reload before anything changed.
	commitTLS, err := s.tls.prepare(cfg)
	if err != nil {
		return nil, nil, err
	}
	s.cfg = cfg // the backends built below read it
	// The engines' keys change before a backend is added: an engine added
	// with new keys is never called with the old ones.
	s.engineAuth.Set(cfg.UpstreamAuth)
	var undo []func()
	defer func() {
		if err == nil {
			return
		}
		s.cfg = old
		s.engineAuth.Set(old.UpstreamAuth)
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
		removed, moved = nil, nil
	}()
	breakerChanged := old.Breaker != cfg.Breaker
	want := map[*proxy.Backend]bool{}
	apply := func(url string, role proxy.Role, port *int) error {
		if b := s.Pool.Find(url); b != nil && b.Role == role {
			want[b] = true
			if role == proxy.Prefill {
				prev := b.Bootstrap()
				if s.setBootstrap(b, port) {
					undo = append(undo, func() {
						next := b.Bootstrap()
						s.setBootstrap(b, prev.Port) // s.cfg is the old config again
						s.reg.retire(next, s.Pool)
					})
					if err := s.reg.attach(b); err != nil {
						return err
					}
					moved = append(moved, prev)
				}
			}
			if breakerChanged {
				prev := b.Breaker()
				undo = append(undo, func() { b.SetBreaker(prev) })
				s.setBreaker(b)
			}
			return nil
		}
		b, err := s.newBackendLocked(url, role, port)
		if err != nil {
			return err
		}
		s.Pool.Add(b)
		undo = append(undo, func() {
			s.Pool.Remove(b)
			b.Close()
			if b.Role == proxy.Prefill {
				s.reg.retire(b.Bootstrap(), s.Pool)
			}
		})
		want[b] = true
		s.log.Info().Str("role", role.String()).Str("url", b.URL).Msg("reload: backend added")
		return nil
	}
	for _, p := range cfg.Prefill {
		if err := apply(p.URL, proxy.Prefill, p.BootstrapPort); err != nil {
			return nil, nil, err
		}
	}
	for _, d := range cfg.Decode {
		if err := apply(d.URL, proxy.Decode, nil); err != nil {
			return nil, nil, err
		}
	}
	for _, role := range []proxy.Role{proxy.Prefill, proxy.Decode} {
		for _, b := range s.Pool.Backends(role) {
			// etcd's workers and the pods' engines are not the file's to remove.
			if !want[b] && !s.cluster.holds(b.URL) && !s.discovery.holds(b.URL) {
				removed = append(removed, b)
			}
		}
	}
	s.Router.Apply(router.SettingsFrom(cfg))
	if old.Health != cfg.Health || old.Policy.DPAware != cfg.Policy.DPAware || old.Policy.PowerOfTwo != cfg.Policy.PowerOfTwo {
		s.health.Stop()
		s.health = s.newHealthChecker(cfg.Health)
		if s.started {
			s.health.Start()
		}
	}
	commitTLS()
	logEngineAuth(cfg, s.log)
	s.log.Info().Int("prefill", len(cfg.Prefill)).Int("decode", len(cfg.Decode)).Msg("configuration reloaded")
	return removed, moved, nil
}

// keepStartupOnly puts back into next the running values of the keys that
// are read once, when pdlb starts (listeners and their limits, logging,
// the embedded registry's rules, the poller), and returns the keys that
// differed: a reload must neither pretend to apply them nor report them
// in force.
func keepStartupOnly(old, next *config.Config) []string {
	var kept []string
	keep := func(key string, changed bool, restore func()) {
		if changed {
			kept = append(kept, key)
			restore()
		}
	}
	o, n := &old.Server, &next.Server
	keep("server.host", o.Host != n.Host, func() { n.Host = o.Host })
	keep("server.port", o.Port != n.Port, func() { n.Port = o.Port })
	keep("server.read_timeout", o.ReadTimeout != n.ReadTimeout, func() { n.ReadTimeout = o.ReadTimeout })
	keep("server.write_timeout", o.WriteTimeout != n.WriteTimeout, func() { n.WriteTimeout = o.WriteTimeout })
	keep("server.idle_timeout", o.IdleTimeout != n.IdleTimeout, func() { n.IdleTimeout = o.IdleTimeout })
	keep("server.max_header_bytes", o.MaxHeaderBytes != n.MaxHeaderBytes, func() { n.MaxHeaderBytes = o.MaxHeaderBytes })
	// A listener's TLS files reload; turning TLS on or off needs a new listener.
	keep("server.tls", o.TLS.Enabled() != n.TLS.Enabled(), func() { n.TLS = o.TLS })
	keep("limits.max_body_bytes", old.Limits.MaxBodyBytes != next.Limits.MaxBodyBytes, func() { next.Limits.MaxBodyBytes = old.Limits.MaxBodyBytes })
	keep("log", old.Log != next.Log, func() { next.Log = old.Log })
	oa, na := old.Admin, next.Admin
	oa.TLS, na.TLS = config.ListenerTLS{}, config.ListenerTLS{}
	keep("admin", oa != na, func() { tls := next.Admin.TLS; next.Admin = old.Admin; next.Admin.TLS = tls })
	keep("admin.tls", old.Admin.TLS.Enabled() != next.Admin.TLS.Enabled(), func() { next.Admin.TLS = old.Admin.TLS })
	keep("metrics.enabled", old.Metrics != next.Metrics, func() { next.Metrics = old.Metrics })
	ob, nb := &old.Bootstrap, &next.Bootstrap
	keep("bootstrap.mode", ob.Mode != nb.Mode, func() { nb.Mode = ob.Mode })
	keep("bootstrap.listen_host", ob.ListenHost != nb.ListenHost, func() { nb.ListenHost = ob.ListenHost })
	keep("bootstrap.auth_token", ob.AuthToken != nb.AuthToken, func() { nb.AuthToken = ob.AuthToken })
	keep("bootstrap.allowed_sources", !slices.Equal(ob.AllowedSources, nb.AllowedSources), func() { nb.AllowedSources = ob.AllowedSources })
	keep("bootstrap.extended_sentinel", ob.ExtendedSentinel != nb.ExtendedSentinel, func() { nb.ExtendedSentinel = ob.ExtendedSentinel })
	keep("bootstrap.dp_rank_ttl", ob.DPRankTTL != nb.DPRankTTL, func() { nb.DPRankTTL = ob.DPRankTTL })
	keep("bootstrap.poll_interval", ob.PollInterval != nb.PollInterval, func() { nb.PollInterval = ob.PollInterval })
	keep("bootstrap.forget_after", ob.ForgetAfter != nb.ForgetAfter, func() { nb.ForgetAfter = ob.ForgetAfter })
	// The etcd connection, its prefix and this replica's lease are made once.
	keep("cluster.etcd", !reflect.DeepEqual(old.Cluster, next.Cluster), func() { next.Cluster = old.Cluster })
	// The informers and their selectors are set up once.
	keep("discovery", old.Discovery != next.Discovery, func() { next.Discovery = old.Discovery })
	keep("tracing", !sameTracing(old.Tracing, next.Tracing), func() { next.Tracing = old.Tracing })
	return kept
}
