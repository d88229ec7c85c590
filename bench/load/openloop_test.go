package load

import (
	"context"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

func TestScheduleIsPoissonAtRate(t *testing.T) {
	const rate, n = 500.0, 20000
	s := newSchedule(rate, 7)
	var last, prev time.Duration
	var sq float64
	for range n {
		last = s.next()
		gap := (last - prev).Seconds()
		sq += gap * gap
		prev = last
	}
	// Mean gap 1/rate, and for an exponential law E[gap²] = 2/rate².
	if mean := last.Seconds() / n; math.Abs(mean*rate-1) > 0.03 {
		t.Errorf("mean gap = %.5fs, want 1/%g ± 3%%", mean, rate)
	}
	if m2 := sq / n * rate * rate; math.Abs(m2-2) > 0.15 {
		t.Errorf("E[gap²]·rate² = %.3f, want 2 (exponential gaps)", m2)
	}
	again := newSchedule(rate, 7)
	if again.next() != newSchedule(rate, 7).next() {
		t.Error("same seed, different schedule")
	}
}

func TestOpenLoopHonoursRate(t *testing.T) {
	url := serve(t, engine(0))
	const rate, dur = 2000.0, 500 * time.Millisecond
	rep, err := Run(context.Background(), Options{
		Targets: []string{url}, Rate: rate, Duration: dur, Concurrency: 64, OutputLen: Dist{1, 1}, Seed: 3,
	})
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Targets[0].Rounds[0]
	// Arrivals in the window are Poisson(rate·dur) = 1000 ± 32: allow four sigma. The count
	// comes from the seeded schedule, not from the wall clock, so it does not flake.
	want := rate * dur.Seconds()
	if d := math.Abs(float64(r.Scheduled) - want); d > 4*math.Sqrt(want) {
		t.Errorf("scheduled %d arrivals in %v at %g/s, want %g ± %.0f", r.Scheduled, dur, rate, want, 4*math.Sqrt(want))
	}
	if r.Completed+r.Failed+r.Dropped != r.Scheduled {
		t.Errorf("completed %d + failed %d + dropped %d != scheduled %d", r.Completed, r.Failed, r.Dropped, r.Scheduled)
	}
}

func TestOpenLoopDropsAtCapAndCountsFromSchedule(t *testing.T) {
	release := make(chan struct{})
	var hits atomic.Int64
	url := serve(t, func(ctx *fasthttp.RequestCtx) {
		hits.Add(1)
		<-release
		ctx.SetContentType("application/json")
		ctx.WriteString(`{"meta_info":{"completion_tokens":1}}`)
	})
	done := make(chan *Report)
	go func() {
		rep, _ := Run(context.Background(), Options{
			// At 1e9/s every arrival is due at once: the dispatcher never sleeps, so it has
			// handed out 2 and dropped 48 long before the server lets the first 2 go.
			Targets: []string{url}, Rate: 1e9, Requests: 50, Concurrency: 2, Timeout: 10 * time.Second,
		})
		done <- rep
	}()
	// Both slots are held by the server, so the other 48 arrivals must be dropped.
	for hits.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	close(release)
	r := (<-done).Targets[0].Rounds[0]
	if r.Scheduled != 50 || r.Completed != 2 || r.Dropped != 48 {
		t.Errorf("scheduled=%d completed=%d dropped=%d, want 50/2/48", r.Scheduled, r.Completed, r.Dropped)
	}
	// Latency counts from the scheduled time, so it includes the time the server held them.
	if r.Latency.Max < 20 {
		t.Errorf("max latency %.2f ms, want ≥ 20 ms (the hold)", r.Latency.Max)
	}
}
