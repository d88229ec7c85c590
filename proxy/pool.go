package proxy

import (
	"slices"
	"time"

	"pdlb"
	"pdlb/config"
)

// Readiness tells whether a prefill's bootstrap registry namespace has every
// rank registered. bootstrap.Directory implements it; a prefill that is not
// ready is treated like one whose breaker is open.
type Readiness interface {
	Ready(addr string) bool
}

// Pool is the live set of backends. The request path reads each role's
// slice with one atomic load; the admin API and reloads replace it whole.
type Pool struct {
	prefill pdlb.CopyOnWrite[[]*Backend]
	decode  pdlb.CopyOnWrite[[]*Backend]
	ready   Readiness
	now     func() time.Time
}

// NewPool returns an empty pool; ready may be nil (no registry gating).
func NewPool(ready Readiness) *Pool {
	return &Pool{ready: ready, now: time.Now}
}

// Backends returns the current backends of a role; callers must not modify it.
func (p *Pool) Backends(role Role) []*Backend { return p.slot(role).Load() }

// Add inserts b, replacing a backend of its role with the same URL.
func (p *Pool) Add(b *Backend) {
	p.slot(b.Role).Update(func(cur []*Backend) ([]*Backend, bool) {
		next := make([]*Backend, 0, len(cur)+1)
		for _, old := range cur {
			if old.key != b.key {
				next = append(next, old)
			}
		}
		return append(next, b), true
	})
}

// Remove takes b out of selection and reports whether it was in the pool.
func (p *Pool) Remove(b *Backend) bool {
	removed := false
	p.slot(b.Role).Update(func(cur []*Backend) ([]*Backend, bool) {
		i := slices.Index(cur, b)
		if i < 0 {
			return cur, false
		}
		removed = true
		return slices.Delete(slices.Clone(cur), i, i+1), true
	})
	return removed
}

// Find returns the backend at url (any spelling of it) in either role, or
// nil.
func (p *Pool) Find(url string) *Backend {
	u, err := config.ParseBackendURL(url)
	if err != nil {
		return nil
	}
	key := u.Key()
	for _, role := range []Role{Prefill, Decode} {
		for _, b := range p.Backends(role) {
			if b.key == key {
				return b
			}
		}
	}
	return nil
}

func (p *Pool) slot(role Role) *pdlb.CopyOnWrite[[]*Backend] {
	if role == Prefill {
		return &p.prefill
	}
	return &p.decode
}

// Available reports whether selection may pick b now: healthy, not
// draining, breaker not open, and (prefill) registry namespace ready.
func (p *Pool) Available(b *Backend) bool {
	if !b.admits(p.now()) {
		return false
	}
	if b.Role != Prefill || p.ready == nil {
		return true
	}
	addr := b.Bootstrap().Addr
	return addr == "" || p.ready.Ready(addr)
}

// AvailableIgnoringRegistry is Available without the registry condition: a
// prefill that would be picked once its ranks have registered.
func (p *Pool) AvailableIgnoringRegistry(b *Backend) bool { return b.admits(p.now()) }

// RegistryReady reports whether b's registry namespace is ready (true for
// decodes and when no registry is consulted).
func (p *Pool) RegistryReady(b *Backend) bool {
	if b.Role != Prefill || p.ready == nil {
		return true
	}
	addr := b.Bootstrap().Addr
	return addr == "" || p.ready.Ready(addr)
}

// Ticket is an admission to use a backend for one request; Done reports
// the outcome to the breaker and releases the in-flight slot.
type Ticket struct {
	b    *Backend
	br   *Breaker
	done func(error)
	// dp and dpRank count the request on one DP rank (TakeLeastLoadedDPRank).
	dp     *dpLoad
	dpRank int
}

// Acquire asks b's breaker for admission (half-open probes are bounded
// there) and counts the request in flight.
func (b *Backend) Acquire() (Ticket, bool) {
	t := Ticket{b: b, br: b.breaker.Load()}
	if t.br != nil {
		done, err := t.br.allow()
		if err != nil {
			return t, false
		}
		t.done = done
	}
	b.inflight.Add(1)
	b.selected.Add(1)
	return t, true
}

// Done reports the leg's outcome: nil for success (a backend 4xx counts as
// success: the backend is alive), an *UpstreamError otherwise.
func (t Ticket) Done(err *UpstreamError) {
	if t.b == nil {
		return
	}
	t.b.inflight.Add(-1)
	t.settleDPRank()
	if t.done == nil {
		return
	}
	switch {
	case err == nil:
		t.br.record(t.done, nil)
	case err.CountsAsFailure():
		t.br.record(t.done, err)
	case err.PairFault():
		// The pairing failed, not the decode: neither success nor failure.
		t.br.record(t.done, errExcluded)
	case err.Kind == KindStatus:
		t.br.record(t.done, nil)
	default:
		t.br.record(t.done, errExcluded)
	}
}

// Release gives the admission back unused (the request was refused before
// the backend was contacted): the breaker counts nothing.
func (t Ticket) Release() {
	if t.b == nil {
		return
	}
	t.b.inflight.Add(-1)
	t.settleDPRank()
	if t.done != nil {
		t.br.record(t.done, errExcluded)
	}
}

// Backend returns the admitted backend.
func (t Ticket) Backend() *Backend { return t.b }
