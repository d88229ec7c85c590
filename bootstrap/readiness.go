package bootstrap

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
)

// readiness is one prefill registry's state as the request path reads it
// (lock-free: its info once ready, its rank counts) and waits on it (a
// channel closed while ready). A Namespace (embedded mode) and a polled
// target (external mode) each have one, and the Directory methods of
// Registry and Poller are the same few lines over it.
type readiness struct {
	info       atomic.Pointer[PrefillInfo] // non-nil iff ready
	registered atomic.Int64
	expected   atomic.Int64

	mu      sync.Mutex
	readyCh chan struct{} // closed while ready; replaced when readiness is lost
}

func newReadiness() *readiness { return &readiness{readyCh: make(chan struct{})} }

// setReady publishes info and reports whether the registry was not ready before.
func (r *readiness) setReady(info *PrefillInfo) (became bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.info.Swap(info) != nil {
		return false
	}
	close(r.readyCh)
	return true
}

// setNotReady withdraws the info and reports whether the registry was ready.
func (r *readiness) setNotReady() (was bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.info.Swap(nil) == nil {
		return false
	}
	r.readyCh = make(chan struct{})
	return true
}

func (r *readiness) setCounts(registered, expected int) {
	r.registered.Store(int64(registered))
	r.expected.Store(int64(expected))
}

func (r *readiness) readyChan() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.readyCh
}

// The Directory methods, for a registry that may be unknown (nil).

func (r *readiness) ready() bool { return r != nil && r.info.Load() != nil }

func (r *readiness) current() (PrefillInfo, bool) {
	if r != nil {
		if i := r.info.Load(); i != nil {
			return *i, true
		}
	}
	return PrefillInfo{}, false
}

func (r *readiness) status() (registered, expected int) {
	if r == nil {
		return 0, 0
	}
	return int(r.registered.Load()), int(r.expected.Load())
}

// wait returns the info once ready, or an error wrapping ErrNotReady and
// ctx's error (ErrUnknownPrefill when r is nil). poke, when set, is called
// before each wait (the poller polls at once instead of finishing its sleep).
func (r *readiness) wait(ctx context.Context, addr string, poke func()) (PrefillInfo, error) {
	if r == nil {
		return PrefillInfo{}, fmt.Errorf("prefill bootstrap %s: %w", addr, ErrUnknownPrefill)
	}
	for {
		if i, ok := r.current(); ok {
			return i, nil
		}
		ch := r.readyChan()
		if i, ok := r.current(); ok { // became ready between the two loads
			return i, nil
		}
		if poke != nil {
			poke()
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return PrefillInfo{}, fmt.Errorf("prefill bootstrap %s: %w (%s): %w", addr, ErrNotReady, countText(r.registered.Load(), r.expected.Load()), ctx.Err())
		}
	}
}
