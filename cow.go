package pdlb

import (
	"maps"
	"sync"
	"sync/atomic"
)

// CopyOnWrite holds read-mostly state that the request path reads with
// one atomic load and no lock (the backend pool, the registry's
// namespaces, the poller's targets). Writers are serialised and replace
// the value whole: they must not change the value Update gives them but
// return a changed copy. The zero CopyOnWrite holds T's zero value.
type CopyOnWrite[T any] struct {
	mu sync.Mutex
	p  atomic.Pointer[T]
}

// Load returns the current value; callers must not modify it.
func (c *CopyOnWrite[T]) Load() T {
	if p := c.p.Load(); p != nil {
		return *p
	}
	var zero T
	return zero
}

// Update publishes f's result when f reports a change. f runs under the
// writers' lock, so a read-then-write in f is atomic among writers.
func (c *CopyOnWrite[T]) Update(f func(cur T) (next T, changed bool)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if next, changed := f(c.Load()); changed {
		c.p.Store(&next)
	}
}

// WithKey returns a copy of m with k set to v (m itself is not changed).
func WithKey[M ~map[K]V, K comparable, V any](m M, k K, v V) M {
	next := make(M, len(m)+1)
	maps.Copy(next, m)
	next[k] = v
	return next
}

// WithoutKey returns a copy of m without k (m itself is not changed).
func WithoutKey[M ~map[K]V, K comparable, V any](m M, k K) M {
	next := maps.Clone(m)
	delete(next, k)
	return next
}
