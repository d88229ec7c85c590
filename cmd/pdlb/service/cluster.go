package service

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"

	"pdlb/bootstrap/etcdstore"
	"pdlb/config"
	"pdlb/proxy"
	"pdlb/router"
)

// WorkerStore shares the workers added and removed through the admin API
// with the other pdlb replicas (cluster.etcd); nil for one instance.
type WorkerStore interface {
	// Add stores a worker unless the cluster has one at that URL already
	// (created false).
	Add(ctx context.Context, role proxy.Role, url string, bootstrapPort *int) (created bool, err error)
	// Remove deletes a worker and reports whether the cluster had it.
	Remove(ctx context.Context, url string) (existed bool, err error)
}

// clusterWiring connects a Service to etcd when cluster.etcd.endpoints is
// set: the embedded registry keeps its namespaces there, the admin API its
// workers, and watches keep this replica's copies of both current. With no
// endpoints there is none and nothing here runs.
type clusterWiring struct {
	cfg      config.Etcd
	log      zerolog.Logger
	cli      *clientv3.Client
	health   *etcdstore.Health
	registry *etcdstore.Registry // nil unless bootstrap.mode is embedded
	workers  *etcdstore.Workers
	replica  *etcdstore.Replica

	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu sync.Mutex
	// adopted holds the URLs (normalised) of the backends this replica
	// added because etcd lists them; a reload does not drain them, and a
	// deletion in etcd does.
	adopted map[string]bool
}

// newClusterWiring connects to etcd, or returns nil for one instance.
func newClusterWiring(cfg *config.Config, reg *registryWiring, log zerolog.Logger) (*clusterWiring, error) {
	e := cfg.Cluster.Etcd
	if len(e.Endpoints) == 0 {
		return nil, nil
	}
	cli, err := etcdstore.Connect(e)
	if err != nil {
		return nil, err
	}
	c := &clusterWiring{cfg: e, cli: cli, adopted: map[string]bool{},
		log:     log.With().Str("component", "cluster").Logger(),
		health:  etcdstore.NewHealth(cli, e.Prefix, healthEvery, e.RequestTimeout, log),
		workers: etcdstore.NewWorkers(cli, e.Prefix, log),
		replica: etcdstore.NewReplica(cli, e.Prefix, replicaID(cfg), e.LeaseTTL, log)}
	if reg.registry != nil {
		c.registry = etcdstore.NewRegistry(cli, e.Prefix, reg.registry, log)
		reg.registry.SetStore(c.registry, e.RequestTimeout)
	}
	return c, nil
}

// healthEvery is how often etcd is probed for pdlb_cluster_store_up.
const healthEvery = time.Second

// start runs the probe and the watches; s's backends are built by then.
func (c *clusterWiring) start(s *Service) {
	if c == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	c.wg.Go(func() { c.health.Run(ctx) })
	c.wg.Go(func() { c.replica.Run(ctx) })
	if c.registry != nil {
		c.wg.Go(func() { c.registry.Mirror(ctx) })
	}
	c.wg.Go(func() {
		c.workers.Mirror(ctx, func(ws []etcdstore.Worker) { c.listed(s, ws) }, func(w etcdstore.Worker) { c.put(s, w) }, func(u string) { c.deleted(s, u) })
	})
	c.log.Info().Strs("endpoints", c.cfg.Endpoints).Str("prefix", c.cfg.Prefix).Bool("registry", c.registry != nil).Str("replica", c.replica.ID()).
		Msg("sharing the registry and the admin API's workers through etcd")
}

func (c *clusterWiring) shutdown() {
	if c == nil {
		return
	}
	if c.cancel != nil {
		c.cancel()
		c.wg.Wait()
	}
	c.cli.Close()
}

// observe writes pdlb_cluster_store_up at scrape time.
func (c *clusterWiring) observe(m *router.Metrics) {
	if c == nil {
		return
	}
	m.AddWriter(func(w io.Writer) {
		up := uint64(0)
		if c.health.Up() {
			up = 1
		}
		metrics.WriteGaugeUint64(w, "pdlb_cluster_store_up", up)
	})
}

// holds reports whether the backend at url came from etcd (a reload of the
// config file must not drain it).
func (c *clusterWiring) holds(url string) bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.adopted[urlKey(url)]
}

// listed makes the pool hold exactly the stored workers (besides its
// configured ones) after a full list.
func (c *clusterWiring) listed(s *Service, ws []etcdstore.Worker) {
	keep := map[string]bool{}
	for _, w := range ws {
		keep[urlKey(w.URL)] = true
		c.put(s, w)
	}
	c.mu.Lock()
	var gone []string
	for u := range c.adopted {
		if !keep[u] {
			gone = append(gone, u)
		}
	}
	c.mu.Unlock()
	for _, u := range gone {
		c.deleted(s, u)
	}
}

// put adds a stored worker this replica does not have yet.
func (c *clusterWiring) put(s *Service, w etcdstore.Worker) {
	role, msg := parseRole(w.Role)
	if msg != "" {
		c.log.Warn().Str("url", w.URL).Str("role", w.Role).Msg("etcd: ignoring a stored worker: " + msg)
		return
	}
	b, err := s.admin.Adopt(role, w.URL, w.BootstrapPort)
	if err != nil {
		c.log.Error().Err(err).Str("url", w.URL).Str("role", w.Role).Msg("etcd: cannot add a worker another replica added")
		return
	}
	if b != nil {
		c.mu.Lock()
		c.adopted[urlKey(w.URL)] = true
		c.mu.Unlock()
		c.log.Info().Str("backend", b.URL).Str("role", b.Role.String()).Msg("worker added (shared through etcd)")
	}
}

// deleted drains a worker another replica removed.
func (c *clusterWiring) deleted(s *Service, url string) {
	c.mu.Lock()
	k := urlKey(url)
	had := c.adopted[k]
	delete(c.adopted, k)
	c.mu.Unlock()
	if b := s.Pool.Find(url); b != nil && had {
		s.admin.Drain(b)
	}
}

// replicaID names this process in etcd: readable (host and serving
// address) and unique (the pid and a random suffix: a restarted replica is
// a new member, its predecessor's lease runs out on its own).
func replicaID(cfg *config.Config) string {
	host, _ := os.Hostname()
	var r [3]byte
	_, _ = rand.Read(r[:])
	return fmt.Sprintf("%s_%s_%d_%d_%x", host, cfg.Server.Host, cfg.Server.Port, os.Getpid(), r)
}

// urlKey is a backend URL as the pool compares them.
func urlKey(raw string) string {
	if u, err := config.ParseBackendURL(raw); err == nil {
		return u.Key()
	}
	return raw
}

// clusterWorkers is the admin API's WorkerStore over etcd.
type clusterWorkers struct {
	c    *clusterWiring
	pool *proxy.Pool
}

var _ WorkerStore = clusterWorkers{}

func (w clusterWorkers) Add(ctx context.Context, role proxy.Role, url string, port *int) (bool, error) {
	created, _, err := w.c.workers.Add(ctx, urlKey(url), etcdstore.Worker{Role: role.String(), URL: url, BootstrapPort: port})
	if created {
		w.c.mu.Lock()
		w.c.adopted[urlKey(url)] = true
		w.c.mu.Unlock()
	}
	return created, err
}

// Remove deletes the worker and, for a shared prefill whose bootstrap port
// no other prefill here uses, its registry namespace: a prefill removed
// through the admin API is forgotten by every replica. (A prefill of this
// replica's config file is another replica's too, by its own config: its
// namespace stays.)
func (w clusterWorkers) Remove(ctx context.Context, url string) (bool, error) {
	existed, err := w.c.workers.Remove(ctx, urlKey(url))
	if err != nil {
		return false, err
	}
	w.c.mu.Lock()
	delete(w.c.adopted, urlKey(url))
	w.c.mu.Unlock()
	b := w.pool.Find(url)
	if !existed || b == nil || b.Role != proxy.Prefill || w.c.registry == nil {
		return existed, nil
	}
	port := b.Bootstrap().Listen
	for _, o := range w.pool.Backends(proxy.Prefill) {
		if o != b && o.Bootstrap().Listen == port {
			return existed, nil
		}
	}
	if _, err := w.c.registry.Delete(ctx, port); err != nil {
		// The worker is gone everywhere; its namespace stays until a DELETE
		// /route or bootstrap.forget_after.
		w.c.log.Warn().Err(err).Int("bootstrap_port", port).Str("backend", url).
			Msg("prefill removed, but etcd did not take the reset of its registry namespace")
	}
	return existed, nil
}
