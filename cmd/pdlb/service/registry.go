package service

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"

	"pdlb"
	"pdlb/bootstrap"
	"pdlb/config"
	"pdlb/proxy"
	"pdlb/router"
)

// registryWiring connects the KV bootstrap registry to the Service: in
// embedded mode pdlb serves one namespace per prefill bootstrap port; in
// external mode it polls each prefill's own bootstrap server. Either way the
// result is a bootstrap.Directory that gates prefill selection (a prefill
// whose ranks have not all registered is never picked) and answers the
// DP-rank rule.
type registryWiring struct {
	mode     string
	host     string // embedded: listen host
	registry *bootstrap.Registry
	poller   *bootstrap.Poller
	dir      bootstrap.Directory

	mu      sync.Mutex
	servers map[int]*bootstrap.Server
	started bool

	// stopReports ends the embedded registry's unready reports.
	stopReports context.CancelFunc
	reports     sync.WaitGroup
}

// unreadyCheckEvery is how often the embedded registry's namespaces are
// checked for a prefill whose ranks have not all registered (the first
// report of one comes at most this long after pdlb starts).
const unreadyCheckEvery = 5 * time.Second

func newRegistryWiring(cfg *config.Config, log zerolog.Logger) *registryWiring {
	w := &registryWiring{mode: cfg.Bootstrap.Mode, host: cfg.Bootstrap.ListenHost, servers: map[int]*bootstrap.Server{}}
	switch w.mode {
	case "off":
		return w
	case "external":
		// Once ready, re-poll at the health-check interval (at the poll
		// interval when health checks are off).
		refresh := cfg.Health.Interval
		if refresh <= 0 {
			refresh = cfg.Bootstrap.PollInterval
		}
		w.poller = bootstrap.NewPoller(bootstrap.PollerOptions{Interval: cfg.Bootstrap.PollInterval, Refresh: refresh}, log)
		w.dir = w.poller
		return w
	}
	w.registry = bootstrap.NewRegistry(cfg.Bootstrap, log, pdlb.SystemClock())
	w.dir = w.registry
	return w
}

// observe feeds the registry's request counts and rank gauges to m.
func (w *registryWiring) observe(m *router.Metrics, pool *proxy.Pool) {
	if w.registry != nil {
		w.registry.Observe = func(path string, status int) {
			m.Counter(fmt.Sprintf(`pdlb_bootstrap_requests_total{path=%q,status="%d"}`, path, status)).Inc()
		}
	}
	if w.dir != nil {
		m.AddWriter(w.writeMetrics(pool))
	}
}

// attach makes b's registry namespace known (and, once started, served).
func (w *registryWiring) attach(b *proxy.Backend) error {
	if b.Role != proxy.Prefill || w.dir == nil {
		return nil
	}
	bs := b.Bootstrap()
	if w.poller != nil {
		w.poller.Add(bs.Addr)
		return nil
	}
	port := bs.Listen
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.servers[port]; ok {
		return nil
	}
	srv := w.registry.NewServer(port)
	if w.started {
		if err := w.listen(port, srv); err != nil {
			w.registry.RemoveNamespace(port) // nothing may answer for a port nobody serves
			return err
		}
	}
	w.servers[port] = srv
	return nil
}

// detach retires a removed prefill's registry namespace (and, in embedded
// mode, its listener) unless another prefill in the pool still uses it.
func (w *registryWiring) detach(b *proxy.Backend, pool *proxy.Pool) {
	if b.Role == proxy.Prefill {
		w.retire(b.Bootstrap(), pool)
	}
}

// retire drops a rendezvous no prefill in the pool uses any more.
func (w *registryWiring) retire(bs proxy.Bootstrap, pool *proxy.Pool) {
	if w.dir == nil || bs.Addr == "" {
		return
	}
	for _, other := range pool.Backends(proxy.Prefill) {
		if o := other.Bootstrap(); o.Addr == bs.Addr || (w.poller == nil && o.Listen == bs.Listen) {
			return
		}
	}
	if w.poller != nil {
		w.poller.Remove(bs.Addr)
		return
	}
	port := bs.Listen
	w.mu.Lock()
	srv := w.servers[port]
	delete(w.servers, port)
	w.mu.Unlock()
	if srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		srv.Shutdown(ctx)
		cancel()
	}
	w.registry.RemoveNamespace(port)
}

func (w *registryWiring) listen(port int, srv *bootstrap.Server) error {
	addr := net.JoinHostPort(w.host, strconv.Itoa(port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("bootstrap registry: listen %s: %w", addr, err)
	}
	go srv.Serve(ln)
	return nil
}

// start opens a listener per namespace (embedded mode).
func (w *registryWiring) start() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.started = true
	if w.registry != nil {
		ctx, cancel := context.WithCancel(context.Background())
		w.stopReports = cancel
		w.reports.Go(func() { w.registry.RunUnreadyReports(ctx, unreadyCheckEvery) })
	}
	for port, srv := range w.servers {
		if err := w.listen(port, srv); err != nil {
			return err
		}
	}
	return nil
}

func (w *registryWiring) shutdown(ctx context.Context) {
	if w.dir == nil {
		return
	}
	if w.poller != nil {
		w.poller.Close()
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopReports != nil {
		w.stopReports()
		w.reports.Wait()
	}
	for _, srv := range w.servers {
		srv.Shutdown(ctx)
	}
}

// writeMetrics exposes ranks registered vs expected per prefill namespace.
func (w *registryWiring) writeMetrics(pool *proxy.Pool) func(io.Writer) {
	return func(out io.Writer) {
		for _, b := range pool.Backends(proxy.Prefill) {
			addr := b.Bootstrap().Addr
			reg, exp := w.dir.Status(addr)
			labels := `{url=` + strconv.Quote(b.URL) + `,bootstrap=` + strconv.Quote(addr) + `}`
			metrics.WriteGaugeUint64(out, "pdlb_registry_ranks_registered"+labels, uint64(max(reg, 0)))
			metrics.WriteGaugeUint64(out, "pdlb_registry_ranks_expected"+labels, uint64(max(exp, 0)))
		}
	}
}
