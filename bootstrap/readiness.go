package bootstrap

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// UnreadyLogEvery is how often a registry that stays unready (or
// unreachable) is logged again at warn, after its first failure: often
// enough that an operator looking at the log sees why requests get 503,
// rarely enough not to flood it while a prefill loads its model.
const UnreadyLogEvery = 30 * time.Second

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
	// unreadySince is when the registry was first seen unready (zero while
	// ready or not yet seen); lastReport when that was last logged.
	unreadySince, lastReport time.Time
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

// reportUnready decides whether an unready registry is logged now: at its
// first failure, then once every UnreadyLogEvery while it stays unready. It
// also returns how long the registry has been unready.
func (r *readiness) reportUnready(now time.Time) (log bool, unreadyFor time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.unreadySince.IsZero() {
		r.unreadySince, r.lastReport = now, now
		return true, 0
	}
	if now.Sub(r.lastReport) < UnreadyLogEvery {
		return false, now.Sub(r.unreadySince)
	}
	r.lastReport = now
	return true, now.Sub(r.unreadySince)
}

// clearUnready forgets an unready spell (the registry is ready again) and
// returns how long it lasted (0 when there was none).
func (r *readiness) clearUnready(now time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.unreadySince.IsZero() {
		return 0
	}
	d := now.Sub(r.unreadySince)
	r.unreadySince, r.lastReport = time.Time{}, time.Time{}
	return d
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
