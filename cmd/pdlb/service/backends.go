package service

import (
	"pdlb/bootstrap"
	"pdlb/config"
	"pdlb/proxy"
	"pdlb/router"
)

// NewBackend builds a backend as the config says: its breaker and, for a
// prefill, its bootstrap rendezvous and registry namespace. The admin API
// and reloads build theirs through it too.
func (s *Service) NewBackend(url string, role proxy.Role, bootstrapPort *int) (*proxy.Backend, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.newBackendLocked(url, role, bootstrapPort)
}

func (s *Service) newBackendLocked(url string, role proxy.Role, bootstrapPort *int) (*proxy.Backend, error) {
	b, err := proxy.NewBackendTLS(url, role, s.cfg.Timeouts.Connect, s.tls.upstream)
	if err != nil {
		return nil, err
	}
	b.UseAuth(s.engineAuth)
	if role == proxy.Prefill {
		s.setBootstrap(b, bootstrapPort)
		if err := s.reg.attach(b); err != nil {
			return nil, err
		}
	}
	s.setBreaker(b)
	return b, nil
}

func (s *Service) setBreaker(b *proxy.Backend) {
	if !s.cfg.Breaker.Enabled {
		b.SetBreaker(nil)
		return
	}
	b.SetBreaker(proxy.NewBreaker(b.Role.String()+" "+b.URL, s.cfg.Breaker, s.log, s.Metrics.BreakerChange))
}

// setBootstrap sets b's rendezvous and reports whether it changed.
func (s *Service) setBootstrap(b *proxy.Backend, port *int) bool {
	advertise := ""
	if s.cfg.Bootstrap.Mode == "embedded" {
		advertise = s.cfg.Bootstrap.AdvertiseHost
	}
	return b.SetBootstrap(port, advertise, config.DefaultBootstrapPort)
}

// infoSource keeps a nil Directory a nil interface (no registry: no rank checks).
func infoSource(d bootstrap.Directory) router.InfoSource {
	if d == nil {
		return nil
	}
	return d
}
