package router

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pdlb/proxy/proxytest"
)

// manualTimers replaces an Admission's queue-timeout clock with timers the
// test fires by hand, in creation order.
type manualTimers struct {
	mu     sync.Mutex
	timers []chan time.Time
	asked  []time.Duration
}

func (m *manualTimers) install(a *Admission) {
	a.newTimer = func(d time.Duration) (<-chan time.Time, func() bool) {
		m.mu.Lock()
		defer m.mu.Unlock()
		c := make(chan time.Time, 1)
		m.timers = append(m.timers, c)
		m.asked = append(m.asked, d)
		return c, func() bool { return true }
	}
}

func (m *manualTimers) fire(i int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.timers[i] <- time.Now()
}

type acquireResult struct {
	release func()
	status  int
	err     error
}

// acquireAsync starts an Acquire and returns where its result will land.
func acquireAsync(a *Admission, ctx context.Context) <-chan acquireResult {
	out := make(chan acquireResult, 1)
	go func() {
		rel, st, err := a.Acquire(ctx)
		out <- acquireResult{rel, st, err}
	}()
	return out
}

// waitQueued waits until n requests are queued.
func waitQueued(t *testing.T, a *Admission, n int) {
	t.Helper()
	if !proxytest.WaitFor(2*time.Second, func() bool { return a.Queued() == n }) {
		t.Fatalf("queued = %d, want %d", a.Queued(), n)
	}
}

func mustAdmit(t *testing.T, a *Admission) func() {
	t.Helper()
	rel, st, err := a.Acquire(context.Background())
	if err != nil || st != 0 || rel == nil {
		t.Fatalf("Acquire = (%v, %d, %v), want admitted", rel != nil, st, err)
	}
	return rel
}

func TestAdmissionImmediate(t *testing.T) {
	tests := []struct {
		name            string
		max, queue      int
		holders         int // admitted before the probe
		wantStatus      int
		wantErr         error
		wantInFlight    int // after the probe
		wantNotCounting bool
	}{
		{name: "unlimited admits everything", max: 0, queue: 0, holders: 50, wantInFlight: 0, wantNotCounting: true},
		{name: "admitted under the cap", max: 3, queue: 0, holders: 2, wantInFlight: 3},
		{name: "no queue: refused at the cap", max: 2, queue: 0, holders: 2, wantStatus: 429, wantErr: ErrQueueFull, wantInFlight: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := NewAdmission(tt.max, tt.queue, time.Minute)
			for range tt.holders {
				mustAdmit(t, a)
			}
			rel, st, err := a.Acquire(context.Background())
			if st != tt.wantStatus || !errors.Is(err, tt.wantErr) {
				t.Fatalf("Acquire = (%d, %v), want (%d, %v)", st, err, tt.wantStatus, tt.wantErr)
			}
			if (err == nil) != (rel != nil) {
				t.Fatalf("release func present=%v with err=%v", rel != nil, err)
			}
			if got := a.InFlight(); got != tt.wantInFlight {
				t.Fatalf("InFlight = %d, want %d", got, tt.wantInFlight)
			}
			if rel != nil {
				rel()
				if want := max(tt.wantInFlight-1, 0); a.InFlight() != want {
					t.Fatalf("after release InFlight = %d, want %d", a.InFlight(), want)
				}
			}
		})
	}
}

func TestAdmissionQueueFull(t *testing.T) {
	a := NewAdmission(1, 2, time.Minute)
	hold := mustAdmit(t, a)
	w1 := acquireAsync(a, context.Background())
	waitQueued(t, a, 1)
	w2 := acquireAsync(a, context.Background())
	waitQueued(t, a, 2)

	rel, st, err := a.Acquire(context.Background())
	if rel != nil || st != 429 || !errors.Is(err, ErrQueueFull) {
		t.Fatalf("Acquire with cap and queue full = (%v, %d, %v), want (nil, 429, ErrQueueFull)", rel != nil, st, err)
	}
	if a.Queued() != 2 || a.InFlight() != 1 {
		t.Fatalf("a refusal changed the gauges: queued %d in flight %d", a.Queued(), a.InFlight())
	}
	hold()
	(<-w1).release()
	(<-w2).release()
	if a.InFlight() != 0 || a.Queued() != 0 {
		t.Fatalf("after all releases: in flight %d queued %d", a.InFlight(), a.Queued())
	}
}

func TestAdmissionQueueTimeout(t *testing.T) {
	var clock manualTimers
	a := NewAdmission(1, 5, 50*time.Millisecond)
	clock.install(a)
	hold := mustAdmit(t, a)
	w := acquireAsync(a, context.Background())
	waitQueued(t, a, 1)
	select {
	case r := <-w:
		t.Fatalf("queued request answered before its timeout: %+v", r)
	default:
	}
	clock.fire(0)
	r := <-w
	if r.release != nil || r.status != 503 || !errors.Is(r.err, ErrQueueTimeout) {
		t.Fatalf("after queue timeout = (%v, %d, %v), want (nil, 503, ErrQueueTimeout)", r.release != nil, r.status, r.err)
	}
	if clock.asked[0] != 50*time.Millisecond {
		t.Fatalf("timer asked for %v, want limits.queue_timeout 50ms", clock.asked[0])
	}
	if a.Queued() != 0 {
		t.Fatalf("timed-out waiter still queued (%d)", a.Queued())
	}
	// The slot it did not get is still there for the next one.
	hold()
	mustAdmit(t, a)()
}

// TestAdmissionQueueTimeoutWallClock checks the real timer is wired: a
// small timeout ends the wait no sooner than asked.
func TestAdmissionQueueTimeoutWallClock(t *testing.T) {
	a := NewAdmission(1, 1, 50*time.Millisecond)
	defer mustAdmit(t, a)()
	start := time.Now()
	_, st, err := a.Acquire(context.Background())
	if st != 503 || !errors.Is(err, ErrQueueTimeout) {
		t.Fatalf("Acquire = (%d, %v), want (503, ErrQueueTimeout)", st, err)
	}
	if waited := time.Since(start); waited < 50*time.Millisecond {
		t.Fatalf("gave up after %v, before the 50ms queue timeout", waited)
	}
}

func TestAdmissionContextEnds(t *testing.T) {
	a := NewAdmission(1, 1, 0) // no queue timeout: only ctx ends the wait
	hold := mustAdmit(t, a)
	defer hold()
	ctx, cancel := context.WithCancel(context.Background())
	w := acquireAsync(a, ctx)
	waitQueued(t, a, 1)
	cancel()
	r := <-w
	if r.status != 503 || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("after cancel = (%d, %v), want (503, context.Canceled)", r.status, r.err)
	}
}

func TestAdmissionFIFO(t *testing.T) {
	a := NewAdmission(1, 10, time.Minute)
	hold := mustAdmit(t, a)
	var waiters []<-chan acquireResult
	for i := range 5 {
		waiters = append(waiters, acquireAsync(a, context.Background()))
		waitQueued(t, a, i+1) // fixes the arrival order
	}
	release := hold
	for i, w := range waiters {
		release()
		r := <-w // blocks forever (test timeout) if the slot went elsewhere
		if r.err != nil {
			t.Fatalf("waiter %d: %v", i, r.err)
		}
		for j, later := range waiters[i+1:] {
			select {
			case <-later:
				t.Fatalf("waiter %d admitted before older waiter %d released", i+1+j, i)
			default:
			}
		}
		release = r.release
	}
	release()
	if a.InFlight() != 0 {
		t.Fatalf("InFlight = %d after all releases", a.InFlight())
	}
}

func TestAdmissionNoQueueJumping(t *testing.T) {
	a := NewAdmission(1, 10, time.Minute)
	hold := mustAdmit(t, a)
	w := acquireAsync(a, context.Background())
	waitQueued(t, a, 1)
	hold()
	// The freed slot belongs to the waiter even if it has not run yet. A
	// cancelled context makes the newcomer give up at once if it is queued,
	// while a free slot would still admit it.
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if _, st, err := a.Acquire(gone); err == nil {
		t.Fatal("a newcomer took the slot released for the queued request")
	} else if st != 503 {
		t.Fatalf("newcomer status %d, want 503", st)
	}
	(<-w).release()
}

func TestAdmissionSetLimits(t *testing.T) {
	t.Run("lower cap applies to new arrivals", func(t *testing.T) {
		a := NewAdmission(3, 0, time.Minute)
		r1, r2, r3 := mustAdmit(t, a), mustAdmit(t, a), mustAdmit(t, a)
		a.SetLimits(1, 0, time.Minute)
		if limit, queue := a.Limits(); limit != 1 || queue != 0 {
			t.Fatalf("Limits() = %d, %d after SetLimits(1, 0): the gauges would show the old limits", limit, queue)
		}
		if a.InFlight() != 3 {
			t.Fatalf("lowering the cap dropped in-flight requests: %d", a.InFlight())
		}
		if _, st, _ := a.Acquire(context.Background()); st != 429 {
			t.Fatalf("over the new cap: status %d, want 429", st)
		}
		r1()
		r2()
		if _, st, _ := a.Acquire(context.Background()); st != 429 {
			t.Fatalf("at the new cap: status %d, want 429", st)
		}
		r3()
		mustAdmit(t, a)()
	})
	t.Run("lower cap holds back waiters", func(t *testing.T) {
		a := NewAdmission(2, 5, time.Minute)
		r1, r2 := mustAdmit(t, a), mustAdmit(t, a)
		w := acquireAsync(a, context.Background())
		waitQueued(t, a, 1)
		a.SetLimits(1, 5, time.Minute)
		r1() // one left in flight: the new cap of 1 is still full
		if a.Queued() != 1 || a.InFlight() != 1 {
			t.Fatalf("released slot handed on over the lowered cap: queued %d in flight %d", a.Queued(), a.InFlight())
		}
		r2()
		r := <-w
		if r.err != nil {
			t.Fatalf("waiter not admitted once under the cap: %v", r.err)
		}
		r.release()
		if a.InFlight() != 0 {
			t.Fatalf("InFlight = %d after all releases", a.InFlight())
		}
	})
	t.Run("raised cap admits waiters", func(t *testing.T) {
		a := NewAdmission(1, 5, time.Minute)
		defer mustAdmit(t, a)()
		w1 := acquireAsync(a, context.Background())
		waitQueued(t, a, 1)
		w2 := acquireAsync(a, context.Background())
		waitQueued(t, a, 2)
		a.SetLimits(2, 5, time.Minute)
		r := <-w1
		if r.err != nil {
			t.Fatalf("oldest waiter not admitted by the raised cap: %v", r.err)
		}
		if a.Queued() != 1 || a.InFlight() != 2 {
			t.Fatalf("queued %d in flight %d, want 1 and 2", a.Queued(), a.InFlight())
		}
		r.release()
		(<-w2).release()
	})
	t.Run("removed cap admits everyone", func(t *testing.T) {
		a := NewAdmission(1, 5, time.Minute)
		hold := mustAdmit(t, a)
		w := acquireAsync(a, context.Background())
		waitQueued(t, a, 1)
		a.SetLimits(0, 0, 0)
		r := <-w
		if r.err != nil {
			t.Fatalf("waiter not admitted when the cap was removed: %v", r.err)
		}
		for range 100 {
			mustAdmit(t, a)
		}
		r.release()
		hold()
		if a.InFlight() != 0 {
			t.Fatalf("InFlight = %d after counted requests released", a.InFlight())
		}
	})
	t.Run("new queue size and timeout", func(t *testing.T) {
		var clock manualTimers
		a := NewAdmission(1, 0, time.Minute)
		clock.install(a)
		defer mustAdmit(t, a)()
		a.SetLimits(1, 1, 20*time.Millisecond)
		w := acquireAsync(a, context.Background())
		waitQueued(t, a, 1)
		clock.fire(0)
		if r := <-w; r.status != 503 {
			t.Fatalf("status %d, want 503", r.status)
		}
		if clock.asked[0] != 20*time.Millisecond {
			t.Fatalf("queued with timeout %v, want the reloaded 20ms", clock.asked[0])
		}
	})
}

// TestAdmissionConcurrent hammers the gate from 1,000 goroutines (run it
// with -race): the cap holds, everyone is eventually admitted, and the
// gauges return to zero.
func TestAdmissionConcurrent(t *testing.T) {
	const limit, clients = 8, 1000
	a := NewAdmission(limit, clients, time.Minute)
	var cur, peak atomic.Int64
	var refused atomic.Int64
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rel, _, err := a.Acquire(context.Background())
			if err != nil {
				refused.Add(1)
				return
			}
			n := cur.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			cur.Add(-1)
			rel()
		}()
	}
	wg.Wait()
	if refused.Load() != 0 {
		t.Fatalf("%d requests refused with room in the queue", refused.Load())
	}
	if peak.Load() > limit {
		t.Fatalf("%d requests in flight at once, cap %d", peak.Load(), limit)
	}
	if a.InFlight() != 0 || a.Queued() != 0 {
		t.Fatalf("gauges after the storm: in flight %d queued %d", a.InFlight(), a.Queued())
	}
}

// TestAdmissionAllocs guards the cheap paths: no cap, an admission under
// the cap, and a 429 refusal allocate nothing.
func TestAdmissionAllocs(t *testing.T) {
	ctx := context.Background()
	unlimited := NewAdmission(0, 0, 0)
	capped := NewAdmission(1, 0, time.Second)
	cases := map[string]func(){
		"unlimited": func() { rel, _, _ := unlimited.Acquire(ctx); rel() },
		"admitted":  func() { rel, _, _ := capped.Acquire(ctx); rel() },
	}
	for name, f := range cases {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %v allocs per Acquire/release, want 0", name, n)
		}
	}
	defer mustAdmit(t, capped)()
	if n := testing.AllocsPerRun(100, func() { capped.Acquire(ctx) }); n != 0 {
		t.Errorf("429 refusal: %v allocs, want 0", n)
	}
}

func BenchmarkAdmission(b *testing.B) {
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		max  int
	}{{"unlimited", 0}, {"capped", 1 << 20}} {
		b.Run(bc.name, func(b *testing.B) {
			a := NewAdmission(bc.max, 0, time.Second)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					rel, _, _ := a.Acquire(ctx)
					rel()
				}
			})
		})
	}
}
