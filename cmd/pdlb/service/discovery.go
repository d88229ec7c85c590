package service

import (
	"fmt"
	"io"
	"sync"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"

	"pdlb"
	"pdlb/config"
	"pdlb/proxy"
	"pdlb/proxy/discovery"
	"pdlb/router"
)

// Option changes how New builds a Service.
type Option func(*options)

// withClock paces discovery's check for its first list with c (tests).
func withClock(c pdlb.Clock) Option {
	return func(o *options) { o.clock = c }
}

type options struct {
	kube discovery.Pods
	// clock paces discovery's check for its first list; zero: the system's.
	clock pdlb.Clock
}

// WithKubernetes makes discovery.kubernetes list and watch pods through
// client instead of the API server its config names (tests pass
// client-go's fake clientset behind it).
func WithKubernetes(client discovery.Pods) Option {
	return func(o *options) { o.kube = client }
}

// discoveryWiring feeds the pool from Kubernetes when
// discovery.kubernetes.enabled: a Ready pod's engine is added as the admin
// API adds a worker, one that leaves is drained as DELETE /workers drains.
// Every replica watches the pods itself; nothing of it goes through etcd.
type discoveryWiring struct {
	kube *discovery.Kubernetes
	s    *Service

	// mu guards held; it is never held while calling into the admin API
	// or the Service (a reload asks holds under s.mu).
	mu sync.Mutex
	// held is the backend each pod's engine joined as, by URL key.
	held map[string]*proxy.Backend
}

// newDiscoveryWiring connects to the API server (nothing is sent yet), or
// returns nil when discovery is off.
func newDiscoveryWiring(cfg config.Kubernetes, o options, s *Service, log zerolog.Logger) (*discoveryWiring, error) {
	if !cfg.Enabled {
		return nil, nil
	}
	var (
		ns     string
		err    error
		client = o.kube
	)
	if client == nil {
		client, ns, err = discovery.Connect(cfg)
	} else {
		ns, err = discovery.Namespace(cfg.Namespace, discovery.OwnNamespace)
	}
	if err != nil {
		return nil, err
	}
	d := &discoveryWiring{s: s, held: map[string]*proxy.Backend{}}
	if d.kube, err = discovery.NewKubernetes(client, ns, cfg, d, o.clock, log); err != nil {
		return nil, err
	}
	return d, nil
}

var _ discovery.Sink = (*discoveryWiring)(nil)

// Join adds a pod's engine, unless its URL is a backend already.
func (d *discoveryWiring) Join(t discovery.Target) error {
	b, err := d.s.admin.Adopt(t.Role, t.URL, t.BootstrapPort)
	if err != nil {
		return err
	}
	if b == nil {
		return fmt.Errorf("%s is a backend already (config file, admin API or another pod)", t.URL)
	}
	d.mu.Lock()
	d.held[urlKey(t.URL)] = b
	d.mu.Unlock()
	return nil
}

// Leave drains a pod's engine: it leaves selection now, its requests in
// flight finish, then its connections close.
func (d *discoveryWiring) Leave(t discovery.Target) {
	k := urlKey(t.URL)
	d.mu.Lock()
	b := d.held[k]
	delete(d.held, k)
	d.mu.Unlock()
	if b != nil {
		d.s.admin.Drain(b) // false: DELETE /workers was first
	}
}

// holds reports whether a pod's engine is the backend at url (a reload of
// the config file must not drain it).
func (d *discoveryWiring) holds(url string) bool {
	if d == nil {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.held[urlKey(url)] != nil
}

func (d *discoveryWiring) start() error {
	if d == nil {
		return nil
	}
	return d.kube.Start()
}

func (d *discoveryWiring) stop() {
	if d != nil {
		d.kube.Stop()
	}
}

// observe writes pdlb_discovery_pods at scrape time.
func (d *discoveryWiring) observe(m *router.Metrics) {
	if d == nil {
		return
	}
	m.AddWriter(func(w io.Writer) {
		n := d.kube.Joined()
		metrics.WriteGaugeUint64(w, `pdlb_discovery_pods{role="prefill"}`, uint64(n[proxy.Prefill]))
		metrics.WriteGaugeUint64(w, `pdlb_discovery_pods{role="decode"}`, uint64(n[proxy.Decode]))
	})
}
