package bootstrap

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"pdlb"
	"pdlb/config"
)

// Registry is pdlb's embedded bootstrap registry: one Namespace per prefill
// instance, keyed by the instance's bootstrap port. It implements Directory
// for embedded mode, mapping an address to a namespace by its port alone
// (the host is pdlb's own advertise_host).
type Registry struct {
	cfg   config.Bootstrap
	log   zerolog.Logger
	clock pdlb.Clock
	auth  pdlb.Bearer
	// sources is bootstrap.allowed_sources; see admitWrite.
	sources sourceList

	spaces pdlb.CopyOnWrite[map[int]*Namespace]
	// shared is nil for a registry of its own (one pdlb); see SetStore.
	shared *shared

	// Observe, when set before serving, is told every answered request
	// (metrics: bootstrap requests by route and status; path is the route,
	// or "other" for any unknown path).
	Observe func(path string, status int)
}

// NewRegistry builds an empty registry; add a namespace per prefill
// bootstrap port with AddNamespace (NewServer does it for its port).
func NewRegistry(cfg config.Bootstrap, log zerolog.Logger, clock pdlb.Clock) *Registry {
	r := &Registry{cfg: cfg, log: log.With().Str("component", "bootstrap").Logger(), clock: clock.OrSystem(), auth: pdlb.NewBearer("bootstrap.auth_token", cfg.AuthToken)}
	r.sources = newSourceList(cfg.AllowedSources, r.log)
	return r
}

// AddNamespace creates the namespace for a bootstrap port; a no-op when it
// exists (its registrations are kept).
func (r *Registry) AddNamespace(port int) {
	var added *Namespace
	r.spaces.Update(func(m map[int]*Namespace) (map[int]*Namespace, bool) {
		if _, ok := m[port]; ok {
			return m, false
		}
		added = newNamespace(port, newDPRankTable(r.cfg.DPRankTTL, r.clock.Now))
		return pdlb.WithKey(m, port, added), true
	})
	if added != nil && r.shared != nil {
		r.adopt(added)
	}
}

// RemoveNamespace drops a bootstrap port and everything registered on it.
// Its server, if any, then answers 404 to everything.
//
// With a store only this replica forgets it: what is stored stays (other
// replicas may still serve that prefill) and comes back if the port is
// added again.
func (r *Registry) RemoveNamespace(port int) {
	var removed *Namespace
	r.spaces.Update(func(m map[int]*Namespace) (map[int]*Namespace, bool) {
		ns, ok := m[port]
		if !ok {
			return m, false
		}
		removed = ns
		return pdlb.WithoutKey(m, port), true
	})
	if removed != nil && r.shared != nil {
		st, rev := removed.stored()
		r.shared.mu.Lock()
		if p, ok := r.shared.pending[port]; !ok || rev > p.rev {
			r.shared.pending[port] = pendingState{st, rev}
		}
		r.shared.mu.Unlock()
	}
}

func (r *Registry) namespace(port int) *Namespace { return r.spaces.Load()[port] }

// stateOf maps an address to its namespace's readiness by the port alone
// (the host is pdlb's own advertise_host); nil when unknown.
func (r *Registry) stateOf(addr string) *readiness {
	port, ok := addrPort(addr)
	if !ok {
		return nil
	}
	if ns := r.namespace(port); ns != nil {
		return ns.state
	}
	return nil
}

// Ready implements Directory.
func (r *Registry) Ready(addr string) bool { return r.stateOf(addr).ready() }

// Info implements Directory.
func (r *Registry) Info(addr string) (PrefillInfo, bool) { return r.stateOf(addr).current() }

// Status implements Directory.
func (r *Registry) Status(addr string) (registered, expected int) { return r.stateOf(addr).status() }

// WaitInfo implements Directory: it blocks until the namespace is ready or
// ctx is done. Without a deadline on ctx, bootstrap.info_wait bounds the
// wait, so a forgotten timeout cannot hang a request.
func (r *Registry) WaitInfo(ctx context.Context, addr string) (PrefillInfo, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.cfg.InfoWait)
		defer cancel()
	}
	return r.stateOf(addr).wait(ctx, addr, nil)
}

// ReportUnready logs each namespace that is not ready, at warn: at the
// first call that finds it so, then once every UnreadyLogEvery while it
// stays so, with how far registration got and for how long. Without it, a
// prefill whose ranks never register (a stock SGLang prefill, which serves
// its own registry, pointed at pdlb in embedded mode) gets 503s forever
// with nothing said at the default log level.
func (r *Registry) ReportUnready() {
	now := r.clock.Now()
	for port, ns := range r.spaces.Load() {
		if ns.state.ready() {
			ns.state.clearUnready(now)
			continue
		}
		if log, unreadyFor := ns.state.reportUnready(now); log {
			r.log.Warn().Int("bootstrap_port", port).
				Str("cause", countText(ns.state.registered.Load(), ns.state.expected.Load())).Dur("unready_for", unreadyFor).
				Str("register_at", "http://"+net.JoinHostPort(r.cfg.AdvertiseHost, strconv.Itoa(port))+"/route").
				Msg("prefill registry not ready: requests are not routed to this prefill until its ranks register with pdlb " +
					"(stock SGLang prefills serve their own registry: use bootstrap.mode external for them)")
		}
	}
}

// RunUnreadyReports calls ReportUnready every interval until ctx ends.
func (r *Registry) RunUnreadyReports(ctx context.Context, every time.Duration) {
	for r.clock.Sleep(ctx, every) == nil {
		r.ReportUnready()
	}
}

// countText is the "k of N ranks registered" of not-ready answers; N is "?"
// until the first rank has told the topology.
func countText(registered, expected int64) string {
	if expected == 0 {
		return fmt.Sprintf("%d of ? ranks registered", registered)
	}
	return fmt.Sprintf("%d of %d ranks registered", registered, expected)
}
