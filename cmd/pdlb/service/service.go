// Package service assembles a whole pdlb from a config: the backend pool,
// the KV bootstrap registry (embedded or polled), health checks, the
// request router and its listener, the admin API, metrics; it applies
// reloads and shuts everything down in order. cmd/pdlb only parses
// arguments, builds one and waits for signals; tests build real ones on
// loopback.
package service

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"pdlb"
	"pdlb/bootstrap/etcdstore"
	"pdlb/config"
	"pdlb/proxy"
	"pdlb/router"
)

// Service is a whole pdlb.
type Service struct {
	Router  *router.Router
	Pool    *proxy.Pool
	Metrics *router.Metrics
	log     zerolog.Logger
	ln      net.Listener
	admin   *Admin
	adminSv *fasthttp.Server
	adminLn net.Listener
	reg     *registryWiring
	// tls holds the listeners' certificates and upstream_tls (tls_reload.go).
	tls *serviceTLS
	// engineAuth is upstream_auth, shared by every backend.
	engineAuth *proxy.EngineAuth
	cluster    *clusterWiring // nil for one instance (no cluster.etcd.endpoints)
	forget     *forgetter     // nil unless bootstrap.forget_after (embedded mode)
	// discovery is nil unless discovery.kubernetes.enabled.
	discovery *discoveryWiring
	// tracing is the tracer provider; nil when tracing is off.
	tracing *sdktrace.TracerProvider
	// traceFlush bounds the export of queued spans at shutdown.
	traceFlush time.Duration
	// status is the admin listener's status page; its sampler runs while
	// the admin listener does (stopStatus ends it).
	status     *statusPage
	stopStatus context.CancelFunc
	statusDone sync.WaitGroup

	// mu guards cfg and health against concurrent reloads and admin additions.
	mu      sync.Mutex
	cfg     *config.Config
	health  *proxy.HealthChecker
	started bool
}

// New wires a Service; nothing listens until Start.
func New(cfg *config.Config, log zerolog.Logger, opts ...Option) (_ *Service, err error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	tlsSet, err := newServiceTLS(cfg, log)
	if err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, log: log, reg: newRegistryWiring(cfg, log), traceFlush: traceFlushTimeout, tls: tlsSet,
		engineAuth: proxy.NewEngineAuth(cfg.UpstreamAuth)}
	logEngineAuth(cfg, log)
	if s.cluster, err = newClusterWiring(cfg, s.reg, log); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.cluster.shutdown() // the etcd client's connections
		}
	}()
	var ready proxy.Readiness
	if s.reg.dir != nil {
		ready = s.reg.dir
	}
	s.Pool = proxy.NewPool(ready)
	s.Metrics = router.NewMetrics(s.Pool)
	s.reg.observe(s.Metrics, s.Pool)
	s.cluster.observe(s.Metrics)
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
	tp, err := newTracerProvider(cfg.Tracing, log)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	s.tracing = tp
	ro := router.Options{
		Settings: router.SettingsFrom(cfg),
		Pool:     s.Pool,
		Metrics:  s.Metrics,
		Info:     infoSource(s.reg.dir),
		Log:      log,
	}
	if tp != nil {
		ro.Tracer = tp.Tracer("pdlb")
	}
	s.Router = router.New(ro)
	if cfg.Bootstrap.ForgetAfter > 0 && s.reg.registry != nil {
		var replica *etcdstore.Replica
		timeout := config.Default().Cluster.Etcd.RequestTimeout
		if s.cluster != nil {
			replica, timeout = s.cluster.replica, cfg.Cluster.Etcd.RequestTimeout
		}
		s.forget = newForgetter(cfg.Bootstrap.ForgetAfter, s.reg.registry, replica, timeout, pdlb.SystemClock(), log)
	}
	s.health = s.newHealthChecker(cfg.Health)
	s.admin = NewAdmin(s.Pool, s.NewBackend, cfg.Admin.APIKey, log.With().Str("listener", "admin").Logger())
	s.admin.OnDrained = func(b *proxy.Backend) { s.reg.detach(b, s.Pool) }
	s.admin.AvoidedPairs = s.Router.AvoidedPairs
	s.admin.Flush = s.Router.AdminBroadcast(fasthttp.MethodPost, "/flush_cache")
	if s.cluster != nil {
		s.admin.Shared, s.admin.Timeout = clusterWorkers{s.cluster, s.Pool}, cfg.Cluster.Etcd.RequestTimeout
	}
	if s.discovery, err = newDiscoveryWiring(cfg.Discovery.Kubernetes, o, s, log); err != nil {
		return nil, err
	}
	s.discovery.observe(s.Metrics)
	s.status = &statusPage{pool: s.Pool, admin: s.admin, router: s.Router, metrics: s.Metrics, dir: s.reg.dir, now: time.Now}
	s.status.sampler = newStatusSampler(s.Metrics, s.sampledBackends, pdlb.SystemClock())
	if cfg.Metrics.Enabled {
		s.Router.Handle(fasthttp.MethodGet, "/metrics", s.Metrics.Handler)
	}
	return s, nil
}

// Start listens on server.host:server.port and serves in the background.
func (s *Service) Start() error {
	if err := s.reg.start(); err != nil {
		return err
	}
	cfg := s.Config()
	addr := net.JoinHostPort(cfg.Server.Host, strconv.Itoa(cfg.Server.Port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	if s.tls.server != nil {
		ln = s.tls.server.listen(ln)
	}
	s.ln = ln
	go func() {
		// A Shutdown that comes before this goroutine runs has closed ln:
		// Serve then returns at once instead of serving for ever.
		if err := s.Router.Serve(ln); err != nil && !errors.Is(err, net.ErrClosed) {
			s.log.Error().Err(err).Msg("server stopped")
		}
	}()
	s.log.Info().Str("addr", ln.Addr().String()).Bool("tls", s.tls.server != nil).Int("prefill", len(cfg.Prefill)).Int("decode", len(cfg.Decode)).Msg("pdlb listening")
	for _, r := range []struct {
		role string
		n    int
	}{{"prefill", len(cfg.Prefill)}, {"decode", len(cfg.Decode)}} {
		if r.n == 0 {
			s.log.Warn().Str("role", r.role).Msg("no " + r.role + " backend in the configuration: not ready until one joins (POST /workers on the admin API, cluster.etcd, discovery)")
		}
	}
	s.mu.Lock()
	s.started = true
	s.health.Start()
	s.mu.Unlock()
	if cfg.Admin.Port != 0 {
		if err := s.startAdmin(cfg.Admin); err != nil {
			return err
		}
	}
	s.cluster.start(s)
	s.forget.start()
	s.tls.startWatch()
	return s.discovery.start()
}

func (s *Service) newHealthChecker(c config.Health) *proxy.HealthChecker {
	h := proxy.NewHealthChecker(s.Pool, c, s.log)
	h.OnResult = func(b *proxy.Backend, ok bool) {
		s.Metrics.HealthCheck(b, ok)
		s.forget.observe(b, ok)
	}
	h.DPSizes = s.cfg.Policy.DPAware
	h.EngineLoads = s.cfg.Policy.PowerOfTwo.EngineLoad
	return h
}

// startAdmin serves the admin API (/workers), the status page and /metrics
// on admin.host:admin.port, and starts the status page's sampler.
func (s *Service) startAdmin(c config.Admin) error {
	addr := net.JoinHostPort(c.Host, strconv.Itoa(c.Port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("admin listen %s: %w", addr, err)
	}
	if s.tls.admin != nil {
		ln = s.tls.admin.listen(ln)
	}
	s.adminSv = &fasthttp.Server{Handler: s.adminHandler, Name: "pdlb-admin", ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second, Logger: debugLogger{s.log}}
	s.adminLn = ln
	go s.adminSv.Serve(ln)
	ctx, cancel := context.WithCancel(context.Background())
	s.stopStatus = cancel
	s.statusDone.Go(func() { s.status.sampler.run(ctx) })
	s.log.Info().Str("addr", ln.Addr().String()).Bool("tls", s.tls.admin != nil).Msg("admin API listening")
	return nil
}

func (s *Service) adminHandler(ctx *fasthttp.RequestCtx) {
	switch path := string(ctx.Path()); {
	case path == "/metrics":
		if s.admin.authorized(ctx) {
			s.Metrics.Handler(ctx)
		}
	case s.status.serves(path):
		s.status.handle(ctx)
	default:
		s.admin.Handler(ctx)
	}
}

// sampledBackends is what the status page samples: the pool and the
// backends still draining (their requests are still counted).
func (s *Service) sampledBackends() []*proxy.Backend {
	out := slices.Concat(s.Pool.Backends(proxy.Prefill), s.Pool.Backends(proxy.Decode))
	return append(out, s.admin.Draining()...)
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
// requests and streams finish until ctx ends; then the admin API, the
// registry and the backends' connections close.
func (s *Service) Shutdown(ctx context.Context) error {
	// The router first: readiness turns 503 and the listener closes at once,
	// not after a health-check round in progress (up to health.timeout).
	err := s.Router.Shutdown(ctx)
	// fasthttp closes only the listeners its Serve has already taken; one
	// whose Serve goroutine has not run yet would be served after this.
	s.ln.Close()
	s.mu.Lock()
	health := s.health
	s.mu.Unlock()
	health.Stop()
	if s.adminSv != nil {
		s.adminSv.ShutdownWithContext(ctx)
		s.adminLn.Close()
		s.stopStatus()
		s.statusDone.Wait()
	}
	s.forget.stop()
	s.cluster.shutdown()
	s.discovery.stop()
	s.admin.Close()
	s.tls.close()
	s.reg.shutdown(ctx)
	for _, role := range []proxy.Role{proxy.Prefill, proxy.Decode} {
		for _, b := range s.Pool.Backends(role) {
			b.Close()
		}
	}
	// Last: every request has ended its spans by now (or been cut).
	shutdownTracing(ctx, s.tracing, s.traceFlush, s.log)
	return err
}

// debugLogger routes fasthttp's own messages (malformed requests, timeouts)
// to the log at debug: they are client noise, not pdlb faults.
type debugLogger struct{ log zerolog.Logger }

func (l debugLogger) Printf(format string, args ...any) { l.log.Debug().Msgf(format, args...) }
