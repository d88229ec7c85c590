package bootstrap

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"pdlb"
	"pdlb/config"
)

// DefaultDPRankTTL is how long /register_dp_rank entries live when
// config.Bootstrap.DPRankTTL is zero (SGLang's cleanup interval).
const DefaultDPRankTTL = 120 * time.Second

// Registry is pdlb's embedded bootstrap registry: one Namespace per prefill
// instance, keyed by the instance's bootstrap port. It implements Directory
// for embedded mode, mapping an address to a namespace by its port alone
// (the host is pdlb's own advertise_host).
type Registry struct {
	cfg   config.Bootstrap
	log   zerolog.Logger
	clock pdlb.Clock
	auth  pdlb.Bearer

	mu     sync.Mutex                         // serialises AddNamespace/RemoveNamespace
	spaces atomic.Pointer[map[int]*Namespace] // copy-on-write: lookups take no lock

	// Observe, when set before serving, is told every answered request
	// (metrics: bootstrap requests by route and status).
	Observe func(path string, status int)
}

// NewRegistry builds an empty registry; add a namespace per prefill
// bootstrap port with AddNamespace (NewServer does it for its port).
func NewRegistry(cfg config.Bootstrap, log zerolog.Logger, clock pdlb.Clock) *Registry {
	if cfg.DPRankTTL <= 0 {
		cfg.DPRankTTL = DefaultDPRankTTL
	}
	r := &Registry{cfg: cfg, log: log.With().Str("component", "bootstrap").Logger(), clock: clock.OrSystem(), auth: pdlb.NewBearer("bootstrap.auth_token", cfg.AuthToken)}
	r.spaces.Store(&map[int]*Namespace{})
	return r
}

// AddNamespace creates the namespace for a bootstrap port; a no-op when it
// exists (its registrations are kept).
func (r *Registry) AddNamespace(port int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := *r.spaces.Load()
	if _, ok := old[port]; ok {
		return
	}
	m := make(map[int]*Namespace, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[port] = newNamespace(port, newDPRankTable(r.cfg.DPRankTTL, r.clock.Now))
	r.spaces.Store(&m)
}

// RemoveNamespace drops a bootstrap port and everything registered on it.
// Its server, if any, then answers 404 to everything.
func (r *Registry) RemoveNamespace(port int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := *r.spaces.Load()
	if _, ok := old[port]; !ok {
		return
	}
	m := make(map[int]*Namespace, len(old))
	for k, v := range old {
		if k != port {
			m[k] = v
		}
	}
	r.spaces.Store(&m)
}

// Ports lists the namespaces' bootstrap ports in ascending order.
func (r *Registry) Ports() []int {
	m := *r.spaces.Load()
	ports := make([]int, 0, len(m))
	for p := range m {
		ports = append(ports, p)
	}
	slices.Sort(ports)
	return ports
}

// Reset clears a namespace like DELETE /route (for an admin API); false when
// the port has no namespace.
func (r *Registry) Reset(port int) bool {
	ns := r.namespace(port)
	if ns == nil {
		return false
	}
	n := ns.reset()
	r.log.Info().Int("bootstrap_port", port).Int("dropped_ranks", n).Msg("bootstrap namespace reset")
	return true
}

func (r *Registry) namespace(port int) *Namespace { return (*r.spaces.Load())[port] }

func (r *Registry) byAddr(addr string) *Namespace {
	port, ok := addrPort(addr)
	if !ok {
		return nil
	}
	return r.namespace(port)
}

// Ready implements Directory.
func (r *Registry) Ready(addr string) bool {
	ns := r.byAddr(addr)
	return ns != nil && ns.ready.Load()
}

// Info implements Directory.
func (r *Registry) Info(addr string) (PrefillInfo, bool) {
	if ns := r.byAddr(addr); ns != nil {
		if s := ns.snap.Load(); s != nil {
			return s.info, true
		}
	}
	return PrefillInfo{}, false
}

// WaitInfo implements Directory: it blocks until the namespace is ready or
// ctx is done. Without a deadline on ctx, config.Bootstrap.InfoWait (when
// set) bounds the wait, so a forgotten timeout cannot hang a request.
func (r *Registry) WaitInfo(ctx context.Context, addr string) (PrefillInfo, error) {
	ns := r.byAddr(addr)
	if ns == nil {
		return PrefillInfo{}, fmt.Errorf("prefill bootstrap %s: %w", addr, ErrUnknownPrefill)
	}
	if _, ok := ctx.Deadline(); !ok && r.cfg.InfoWait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.cfg.InfoWait)
		defer cancel()
	}
	for {
		if s := ns.snap.Load(); s != nil {
			return s.info, nil
		}
		ch := ns.readyChan()
		if s := ns.snap.Load(); s != nil {
			return s.info, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return PrefillInfo{}, fmt.Errorf("prefill bootstrap %s: %w (%s): %w", addr, ErrNotReady, countText(ns.registered.Load(), ns.expected.Load()), ctx.Err())
		}
	}
}

// Status implements Directory.
func (r *Registry) Status(addr string) (registered, expected int) {
	ns := r.byAddr(addr)
	if ns == nil {
		return 0, 0
	}
	return int(ns.registered.Load()), int(ns.expected.Load())
}

// countText is the "k of N ranks registered" of not-ready answers; N is "?"
// until the first rank has told the topology.
func countText(registered, expected int64) string {
	if expected == 0 {
		return fmt.Sprintf("%d of ? ranks registered", registered)
	}
	return fmt.Sprintf("%d of %d ranks registered", registered, expected)
}
