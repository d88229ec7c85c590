package proxy

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Readiness tells whether a prefill's bootstrap registry namespace has every
// rank registered. bootstrap.Directory implements it; a prefill that is not
// ready is treated like one whose breaker is open.
type Readiness interface {
	Ready(addr string) bool
}

// Pool is the live set of backends. Readers (the request path) load an
// immutable slice without locking; writers (admin API, reload) copy on write.
type Pool struct {
	prefill atomic.Pointer[[]*Backend]
	decode  atomic.Pointer[[]*Backend]
	mu      sync.Mutex
	ready   Readiness
	now     func() time.Time
}

// NewPool returns an empty pool; ready may be nil (no registry gating).
func NewPool(ready Readiness) *Pool {
	p := &Pool{ready: ready, now: time.Now}
	empty := []*Backend{}
	p.prefill.Store(&empty)
	p.decode.Store(&empty)
	return p
}

// Backends returns the current backends of a role; callers must not modify it.
func (p *Pool) Backends(role Role) []*Backend {
	if role == Prefill {
		return *p.prefill.Load()
	}
	return *p.decode.Load()
}

// Add inserts b, replacing a backend with the same URL and role.
func (p *Pool) Add(b *Backend) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ptr := p.slot(b.Role)
	cur := *ptr.Load()
	next := make([]*Backend, 0, len(cur)+1)
	for _, old := range cur {
		if old.URL != b.URL {
			next = append(next, old)
		}
	}
	next = append(next, b)
	ptr.Store(&next)
}

// Remove takes the backend with url out of selection and returns it (nil if absent).
func (p *Pool) Remove(role Role, url string) *Backend {
	p.mu.Lock()
	defer p.mu.Unlock()
	ptr := p.slot(role)
	cur := *ptr.Load()
	i := slices.IndexFunc(cur, func(b *Backend) bool { return b.URL == url })
	if i < 0 {
		return nil
	}
	removed := cur[i]
	next := slices.Delete(slices.Clone(cur), i, i+1)
	ptr.Store(&next)
	return removed
}

// Find returns the backend with url in either role, or nil.
func (p *Pool) Find(url string) *Backend {
	for _, role := range []Role{Prefill, Decode} {
		for _, b := range p.Backends(role) {
			if b.URL == url {
				return b
			}
		}
	}
	return nil
}

func (p *Pool) slot(role Role) *atomic.Pointer[[]*Backend] {
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
	if t.done == nil {
		return
	}
	switch {
	case err == nil:
		t.br.record(t.done, nil)
	case err.CountsAsFailure():
		t.br.record(t.done, err)
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
	if t.done != nil {
		t.br.record(t.done, errExcluded)
	}
}

// Backend returns the admitted backend.
func (t Ticket) Backend() *Backend { return t.b }
