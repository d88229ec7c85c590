package service

import (
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
func (s *Service) applyLocked(cfg *config.Config) ([]*proxy.Backend, []proxy.Bootstrap, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.cfg
	if old.Server.Host != cfg.Server.Host || old.Server.Port != cfg.Server.Port || old.Bootstrap.Mode != cfg.Bootstrap.Mode {
		s.log.Warn().Msg("reload: server.host, server.port and bootstrap.mode changes need a restart; keeping the old ones")
		cfg.Server.Host, cfg.Server.Port, cfg.Bootstrap.Mode = old.Server.Host, old.Server.Port, old.Bootstrap.Mode
	}
	s.cfg = cfg
	breakerChanged := old.Breaker != cfg.Breaker
	want := map[*proxy.Backend]bool{}
	var moved []proxy.Bootstrap
	apply := func(url string, role proxy.Role, port *int) error {
		if b := s.Pool.Find(url); b != nil && b.Role == role {
			want[b] = true
			if role == proxy.Prefill {
				old := b.Bootstrap()
				if s.setBootstrap(b, port) {
					moved = append(moved, old)
					if err := s.reg.attach(b); err != nil {
						return err
					}
				}
			}
			if breakerChanged {
				s.setBreaker(b)
			}
			return nil
		}
		b, err := s.newBackendLocked(url, role, port)
		if err != nil {
			return err
		}
		s.Pool.Add(b)
		want[b] = true
		s.log.Info().Str("role", role.String()).Str("url", b.URL).Msg("reload: backend added")
		return nil
	}
	for _, p := range cfg.Prefill {
		if err := apply(p.URL, proxy.Prefill, p.BootstrapPort); err != nil {
			return nil, moved, err
		}
	}
	for _, d := range cfg.Decode {
		if err := apply(d.URL, proxy.Decode, nil); err != nil {
			return nil, moved, err
		}
	}
	var removed []*proxy.Backend
	for _, role := range []proxy.Role{proxy.Prefill, proxy.Decode} {
		for _, b := range s.Pool.Backends(role) {
			if !want[b] {
				removed = append(removed, b)
			}
		}
	}
	s.Router.Apply(router.SettingsFrom(cfg))
	if old.Health != cfg.Health {
		s.health.Stop()
		s.health = s.newHealthChecker(cfg.Health)
		if s.started {
			s.health.Start()
		}
	}
	s.log.Info().Int("prefill", len(cfg.Prefill)).Int("decode", len(cfg.Decode)).Msg("configuration reloaded")
	return removed, moved, nil
}
