package router

import (
	"container/list"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// Admission refusals. They are fixed values so refusing under overload
// allocates nothing; callers answer them with Retry-After.
var (
	// ErrQueueFull: every slot is taken and the wait queue is full (429).
	ErrQueueFull = errors.New("too many requests: concurrency limit reached and wait queue full")
	// ErrQueueTimeout: no slot freed up within limits.queue_timeout (503).
	ErrQueueTimeout = errors.New("server busy: no slot freed up within limits.queue_timeout")
)

// Admission caps the requests in flight (limits.max_concurrent_requests)
// and lets a bounded number wait, first come first served, for a slot.
// Freed slots go straight to the oldest waiter so a newcomer cannot jump
// the queue between a release and the waiter waking up.
type Admission struct {
	// max mirrors limit.max so the unlimited case costs one atomic load.
	max atomic.Int64

	mu       sync.Mutex
	limit    admissionLimits
	inflight int
	waiters  list.List // of *waiter, oldest first

	// newTimer makes the queue-timeout clock; tests replace it.
	newTimer func(time.Duration) (<-chan time.Time, func() bool)
	// release is a.release bound once, so Acquire does not allocate a closure.
	release func()
}

type admissionLimits struct {
	max, queue int
	timeout    time.Duration
}

// waiter is one queued request; granted is set (under mu) when a slot is
// handed to it, which also closes ready.
type waiter struct {
	ready   chan struct{}
	granted bool
}

// noRelease is the release func of requests admitted without counting.
func noRelease() {}

// NewAdmission builds the gate. maxConcurrent 0 admits everything;
// queueSize 0 refuses at once when the slots are taken; queueTimeout 0
// lets a queued request wait until its context ends.
func NewAdmission(maxConcurrent, queueSize int, queueTimeout time.Duration) *Admission {
	a := &Admission{newTimer: realTimer}
	a.release = a.releaseSlot
	a.SetLimits(maxConcurrent, queueSize, queueTimeout)
	return a
}

func realTimer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

// SetLimits changes the limits (hot reload). They apply to new arrivals:
// requests in flight keep their slots and queued ones their deadlines. A
// raised cap hands the new slots to waiters at once; removing the cap
// admits every waiter.
func (a *Admission) SetLimits(maxConcurrent, queueSize int, queueTimeout time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.limit = admissionLimits{max: max(maxConcurrent, 0), queue: max(queueSize, 0), timeout: max(queueTimeout, 0)}
	a.max.Store(int64(a.limit.max))
	for a.waiters.Len() > 0 && (a.limit.max == 0 || a.inflight < a.limit.max) {
		a.grantOldest()
		a.inflight++
	}
}

// Acquire admits a request or says why not. On admission err is nil and
// release must be called exactly once when the request is over. On refusal
// release is nil, status is 429 (queue full) or 503 (queue timeout, or ctx
// ended while queued) and err says which.
func (a *Admission) Acquire(ctx context.Context) (release func(), status int, err error) {
	release, status, err, _ = a.acquire(ctx)
	return release, status, err
}

// acquire is Acquire, also saying whether the request waited in the queue
// (a traced request shows that wait).
func (a *Admission) acquire(ctx context.Context) (release func(), status int, err error, queued bool) {
	if a.max.Load() == 0 {
		return noRelease, 0, nil, false
	}
	a.mu.Lock()
	if a.limit.max == 0 { // the cap was removed since the load above
		a.mu.Unlock()
		return noRelease, 0, nil, false
	}
	if a.inflight < a.limit.max && a.waiters.Len() == 0 {
		a.inflight++
		a.mu.Unlock()
		return a.release, 0, nil, false
	}
	if a.waiters.Len() >= a.limit.queue {
		a.mu.Unlock()
		return nil, fasthttp.StatusTooManyRequests, ErrQueueFull, false
	}
	w := &waiter{ready: make(chan struct{})}
	el := a.waiters.PushBack(w)
	timeout := a.limit.timeout
	a.mu.Unlock()

	var expired <-chan time.Time
	if timeout > 0 {
		c, stop := a.newTimer(timeout)
		defer stop()
		expired = c
	}
	var cause error
	select {
	case <-w.ready:
		return a.release, 0, nil, true
	case <-expired:
		cause = ErrQueueTimeout
	case <-ctx.Done():
		cause = ctx.Err()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if w.granted {
		// The slot arrived while giving up: take it rather than lose it.
		return a.release, 0, nil, true
	}
	a.waiters.Remove(el)
	return nil, fasthttp.StatusServiceUnavailable, cause, true
}

// releaseSlot frees a slot, handing it to the oldest waiter if the cap
// still has room for it (it may have been lowered meanwhile).
func (a *Admission) releaseSlot() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.waiters.Len() > 0 && (a.limit.max == 0 || a.inflight <= a.limit.max) {
		a.grantOldest() // the slot passes on: inflight stays
		return
	}
	a.inflight--
}

// grantOldest wakes the oldest waiter with a slot; a.mu must be held.
func (a *Admission) grantOldest() {
	w := a.waiters.Remove(a.waiters.Front()).(*waiter)
	w.granted = true
	close(w.ready)
}

// InFlight is the number of admitted requests not yet released (requests
// admitted while there is no cap are not counted).
func (a *Admission) InFlight() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.inflight
}

// Limits are the cap on admitted requests and the wait queue's size (0:
// no cap, no queue), for the gauges an alert compares Queued against.
func (a *Admission) Limits() (maxConcurrent, queueSize int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.limit.max, a.limit.queue
}

// Queued is the number of requests waiting for a slot.
func (a *Admission) Queued() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.waiters.Len()
}
