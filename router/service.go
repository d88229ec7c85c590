package router

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

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
}

// NewService wires a Service; nothing listens until Start.
func NewService(cfg *config.Config, log zerolog.Logger) (*Service, error) {
	s := &Service{cfg: cfg, log: log, Pool: proxy.NewPool(nil)}
	s.Metrics = NewMetrics(s.Pool)
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
		Settings: SettingsFrom(cfg),
		Pool:     s.Pool,
		Proxy:    proxy.New(cfg.Timeouts, log),
		Metrics:  s.Metrics,
		Log:      log,
	})
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
	b, err := proxy.NewBackend(url, role, s.cfg.Timeouts.Connect)
	if err != nil {
		return nil, err
	}
	if role == proxy.Prefill {
		advertise := ""
		if s.cfg.Bootstrap.Mode == "embedded" {
			advertise = s.cfg.Bootstrap.AdvertiseHost
		}
		b.SetBootstrap(bootstrapPort, advertise, config.DefaultBootstrapPort)
	}
	if s.cfg.Breaker.Enabled {
		b.SetBreaker(proxy.NewBreaker(role.String()+" "+url, s.cfg.Breaker, s.log, s.Metrics.BreakerChange))
	}
	return b, nil
}

// Start listens on server.host:server.port and serves in the background.
func (s *Service) Start() error {
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
	return nil
}

// Addr is the serving address once started.
func (s *Service) Addr() string { return s.ln.Addr().String() }

// Shutdown stops accepting and waits for in-flight requests until ctx ends.
func (s *Service) Shutdown(ctx context.Context) error {
	if s.server == nil {
		return nil
	}
	err := s.server.ShutdownWithContext(ctx)
	for _, role := range []proxy.Role{proxy.Prefill, proxy.Decode} {
		for _, b := range s.Pool.Backends(role) {
			b.Close()
		}
	}
	return err
}
