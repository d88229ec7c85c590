package bootstrap

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Store keeps the registry's namespaces where several pdlb replicas share
// them (etcd: package bootstrap/etcdstore). Without one the registry is
// this process's alone, in memory, as it always was. With one, writes go
// through the store before they are answered, and what the store holds
// comes back through Registry.Apply (its watch); lookups never touch it.
type Store interface {
	// Update reads port's namespace as stored, lets change modify it and
	// writes the result back in one transaction; when another replica
	// wrote in between, change runs again on the fresh state. An error
	// from change is returned as is and nothing is written. It returns the
	// state written and the store revision it holds at.
	Update(ctx context.Context, port int, change func(*NamespaceState) error) (*NamespaceState, int64, error)
	// Delete resets port's namespace for every replica and returns the
	// revision of the deletion.
	Delete(ctx context.Context, port int) (int64, error)
}

// ErrStoreUnavailable wraps a store failure: the write was not stored, and
// its client is told to come back (503 + Retry-After), never a 200.
var ErrStoreUnavailable = errors.New("shared registry store unavailable")

// storeError is a store failure as the write's client sees it.
type storeError struct{ err error }

func (e *storeError) Error() string   { return ErrStoreUnavailable.Error() + ": " + e.err.Error() }
func (e *storeError) Unwrap() []error { return []error{ErrStoreUnavailable, e.err} }

// shared is the registry's side of a Store: the store, the bound on one
// write, and the stored states of ports with no namespace here yet (a
// prefill another replica knows first), applied when it is added.
type shared struct {
	store   Store
	timeout time.Duration

	mu      sync.Mutex
	pending map[int]pendingState
}

type pendingState struct {
	st  *NamespaceState // nil: deleted
	rev int64
}

// SetStore makes the registry keep its namespaces in s; each write waits
// at most timeout for it. Call it before serving.
func (r *Registry) SetStore(s Store, timeout time.Duration) {
	r.shared = &shared{store: s, timeout: timeout, pending: map[int]pendingState{}}
}

// Apply sets port's namespace to st as the store holds it at rev (nil st:
// deleted); the store's watch calls it. A state older than the one held is
// ignored, so the watch and this replica's own writes may arrive in any
// order.
func (r *Registry) Apply(port int, st *NamespaceState, rev int64) {
	sh := r.shared
	sh.mu.Lock()
	ns := r.namespace(port)
	if ns == nil {
		if p, ok := sh.pending[port]; !ok || rev > p.rev {
			sh.pending[port] = pendingState{st, rev}
		}
		sh.mu.Unlock()
		return
	}
	sh.mu.Unlock()
	before, _ := ns.state.status()
	if ns.load(st, rev) {
		r.log.Info().Int("bootstrap_port", port).Int64("ranks", ns.state.expected.Load()).Int64("revision", rev).
			Msg("prefill fully registered (shared registry)")
	} else if st == nil && before > 0 && !ns.state.ready() {
		r.log.Info().Int("bootstrap_port", port).Int64("revision", rev).Msg("bootstrap namespace reset (shared registry)")
	}
}

// Revisions returns the store revision of each namespace held here and
// pending, so a full re-list can tell which were deleted meanwhile.
func (r *Registry) Revisions() map[int]int64 {
	out := map[int]int64{}
	if r.shared == nil {
		return out
	}
	r.shared.mu.Lock()
	for port, p := range r.shared.pending {
		out[port] = p.rev
	}
	r.shared.mu.Unlock()
	for port, ns := range r.spaces.Load() {
		_, out[port] = ns.stored()
	}
	return out
}

// adopt gives a namespace just added the state the store holds for it.
func (r *Registry) adopt(ns *Namespace) {
	sh := r.shared
	sh.mu.Lock()
	p, ok := sh.pending[ns.port]
	delete(sh.pending, ns.port)
	sh.mu.Unlock()
	if ok {
		ns.load(p.st, p.rev)
	}
}

// registerShared is PUT /route with a store: the registration is checked
// against the stored state and written in one transaction, then applied
// here at once (the registrant's next lookup on this replica sees it).
func (r *Registry) registerShared(ns *Namespace, reg *registration, mayMove bool) (prev *RankInfo, becameReady bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), r.shared.timeout)
	defer cancel()
	st, rev, err := r.shared.store.Update(ctx, ns.port, func(st *NamespaceState) error {
		var err error
		prev, err = st.register(reg, mayMove)
		return err
	})
	var fe *fieldError
	var me *moveError
	switch {
	case errors.As(err, &fe), errors.As(err, &me):
		return nil, false, err
	case err != nil:
		return nil, false, &storeError{err}
	}
	return prev, ns.load(st, rev), nil
}

// resetShared is DELETE /route with a store.
func (r *Registry) resetShared(ns *Namespace) (dropped int, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), r.shared.timeout)
	defer cancel()
	rev, err := r.shared.store.Delete(ctx, ns.port)
	if err != nil {
		return 0, &storeError{err}
	}
	dropped = int(ns.state.registered.Load())
	ns.load(nil, rev)
	return dropped, nil
}
