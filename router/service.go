package router

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"pdlb/bootstrap"
	"pdlb/config"
	"pdlb/proxy"
)

// Service is a whole pdlb built from a config: backend pool, proxy, router
// and the client-facing server. cmd/pdlb only parses arguments, builds one
// and waits for signals; tests build real ones on loopback.
type Service struct {
	Router  *Router
	Pool    *proxy.Pool
	Metrics *Metrics
	cfg     *config.Config
	log     zerolog.Logger
	server  *fasthttp.Server
	ln      net.Listener
	health  *proxy.HealthChecker
	admin   *Admin
	adminSv *fasthttp.Server
	adminLn net.Listener
	reg     *registryWiring
	// mu guards cfg against concurrent reloads and admin additions.
	mu sync.Mutex
}

// NewService wires a Service; nothing listens until Start.
func NewService(cfg *config.Config, log zerolog.Logger) (*Service, error) {
	s := &Service{cfg: cfg, log: log, reg: newRegistryWiring(cfg, log)}
	var ready proxy.Readiness
	if s.reg.dir != nil {
		ready = s.reg.dir
	}
	s.Pool = proxy.NewPool(ready)
	s.Metrics = NewMetrics(s.Pool)
	s.reg.observe(s.Metrics, s.Pool)
	for _, p := range cfg.Prefill {
		b, err := s.NewBackend(p.URL, proxy.Prefill, p.BootstrapPort)
		if err != nil {
			return nil, err
		}
		s.Pool.Add(b)
	}
	for _, d := range cfg.Decode {
		b, err := s.NewBackend(d.URL, proxy.Decode, nil)
		if err != nil {
			return nil, err
		}
		s.Pool.Add(b)
	}
	s.Router = New(Options{
		Settings:  SettingsFrom(cfg),
		Pool:      s.Pool,
		Proxy:     proxy.New(cfg.Timeouts, log),
		Metrics:   s.Metrics,
		Admission: NewAdmission(cfg.Limits.MaxConcurrentRequests, cfg.Limits.QueueSize, cfg.Limits.QueueTimeout),
		Info:      infoSource(s.reg.dir),
		Log:       log,
	})
	s.Metrics.AddWriter(func(w io.Writer) {
		metrics.WriteGaugeUint64(w, "pdlb_admission_in_flight", uint64(s.Router.admission.InFlight()))
		metrics.WriteGaugeUint64(w, "pdlb_admission_queued", uint64(s.Router.admission.Queued()))
	})
	s.health = s.newHealthChecker(cfg.Health)
	s.admin = NewAdmin(s.Pool, s.NewBackend, cfg.Admin.APIKey, log.With().Str("listener", "admin").Logger())
	s.admin.OnDrained = func(b *proxy.Backend) { s.reg.detach(b, s.Pool) }
	if cfg.Metrics.Enabled {
		s.Router.Handle(fasthttp.MethodGet, "/metrics", s.Metrics.Handler)
	}
	return s, nil
}

// SettingsFrom picks the request path's settings out of a config.
func SettingsFrom(cfg *config.Config) Settings {
	st := Settings{Limits: cfg.Limits, Retry: cfg.Retry, Server: cfg.Server, Timeout: cfg.Timeouts, InfoWait: cfg.Bootstrap.InfoWait}
	if cfg.Bootstrap.Mode == "embedded" {
		st.AdvertiseHost = cfg.Bootstrap.AdvertiseHost
	}
	return st
}

// NewBackend builds a backend with its breaker as the config says.
func (s *Service) NewBackend(url string, role proxy.Role, bootstrapPort *int) (*proxy.Backend, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.newBackendLocked(url, role, bootstrapPort)
}

func (s *Service) newBackendLocked(url string, role proxy.Role, bootstrapPort *int) (*proxy.Backend, error) {
	b, err := proxy.NewBackend(url, role, s.cfg.Timeouts.Connect)
	if err != nil {
		return nil, err
	}
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
	want := map[string]bool{}
	var moved []proxy.Bootstrap
	apply := func(url string, role proxy.Role, port *int) error {
		url = strings.TrimRight(url, "/") // as proxy.NewBackend keeps it
		want[url] = true
		if b := s.Pool.Find(url); b != nil && b.Role == role {
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
		s.log.Info().Str("role", role.String()).Str("url", url).Msg("reload: backend added")
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
			if !want[b.URL] {
				removed = append(removed, b)
			}
		}
	}
	s.Router.SetSettings(SettingsFrom(cfg))
	s.Router.proxy.SetTimeouts(cfg.Timeouts)
	s.Router.admission.SetLimits(cfg.Limits.MaxConcurrentRequests, cfg.Limits.QueueSize, cfg.Limits.QueueTimeout)
	if old.Health != cfg.Health {
		s.health.Stop()
		s.health = s.newHealthChecker(cfg.Health)
		if s.server != nil {
			s.health.Start()
		}
	}
	s.log.Info().Int("prefill", len(cfg.Prefill)).Int("decode", len(cfg.Decode)).Msg("configuration reloaded")
	return removed, moved, nil
}

// setBootstrap sets b's rendezvous and reports whether it changed.
func (s *Service) setBootstrap(b *proxy.Backend, port *int) bool {
	advertise := ""
	if s.cfg.Bootstrap.Mode == "embedded" {
		advertise = s.cfg.Bootstrap.AdvertiseHost
	}
	return b.SetBootstrap(port, advertise, config.DefaultBootstrapPort)
}

// Start listens on server.host:server.port and serves in the background.
func (s *Service) Start() error {
	if err := s.reg.start(); err != nil {
		return err
	}
	addr := net.JoinHostPort(s.cfg.Server.Host, strconv.Itoa(s.cfg.Server.Port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	s.ln = ln
	s.server = s.Router.NewServer()
	go func() {
		if err := s.server.Serve(ln); err != nil {
			s.log.Error().Err(err).Msg("server stopped")
		}
	}()
	s.log.Info().Str("addr", ln.Addr().String()).Int("prefill", len(s.cfg.Prefill)).Int("decode", len(s.cfg.Decode)).Msg("pdlb listening")
	s.health.Start()
	if s.cfg.Admin.Port != 0 {
		if err := s.startAdmin(); err != nil {
			return err
		}
	}
	return nil
}

func (s *Service) newHealthChecker(c config.Health) *proxy.HealthChecker {
	h := proxy.NewHealthChecker(s.Pool, c, s.log)
	h.OnResult = s.Metrics.HealthCheck
	return h
}

// startAdmin serves the admin API (/workers) and /metrics on admin.host:admin.port.
func (s *Service) startAdmin() error {
	addr := net.JoinHostPort(s.cfg.Admin.Host, strconv.Itoa(s.cfg.Admin.Port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("admin listen %s: %w", addr, err)
	}
	s.adminLn = ln
	s.adminSv = &fasthttp.Server{Handler: s.adminHandler, Name: "pdlb-admin", ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second, Logger: fasthttpLogger{s.Router}}
	go s.adminSv.Serve(ln)
	s.log.Info().Str("addr", ln.Addr().String()).Msg("admin API listening")
	return nil
}

func (s *Service) adminHandler(ctx *fasthttp.RequestCtx) {
	if string(ctx.Path()) == "/metrics" && authorized(ctx, s.Config().Admin.APIKey) {
		s.Metrics.Handler(ctx)
		return
	}
	s.admin.Handler(ctx)
}

// AdminAddr is the admin listener's address ("" when off).
func (s *Service) AdminAddr() string {
	if s.adminLn == nil {
		return ""
	}
	return s.adminLn.Addr().String()
}

// Config returns the configuration in force.
func (s *Service) Config() *config.Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg
}

// Addr is the serving address once started.
func (s *Service) Addr() string { return s.ln.Addr().String() }

// Shutdown drains: readiness turns 503, the listener closes, and in-flight
// requests and streams finish until ctx ends.
func (s *Service) Shutdown(ctx context.Context) error {
	s.Router.SetDraining(true)
	s.mu.Lock()
	health := s.health
	s.mu.Unlock()
	health.Stop()
	if s.server == nil {
		return nil
	}
	err := s.server.ShutdownWithContext(ctx)
	if !s.Router.WaitStreams(ctx.Done()) && err == nil {
		err = ctx.Err()
	}
	if s.adminSv != nil {
		s.adminSv.ShutdownWithContext(ctx)
	}
	s.admin.Close()
	s.reg.shutdown(ctx)
	for _, role := range []proxy.Role{proxy.Prefill, proxy.Decode} {
		for _, b := range s.Pool.Backends(role) {
			b.Close()
		}
	}
	return err
}

// infoSource keeps a nil Directory a nil interface (no registry: no rank checks).
func infoSource(d bootstrap.Directory) InfoSource {
	if d == nil {
		return nil
	}
	return d
}
