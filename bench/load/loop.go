package load

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// roundResult is what a loop hands back: the merged samples plus the schedule's counts.
type roundResult struct {
	stats     stats
	scheduled int64 // open loop: arrivals the schedule produced
	dropped   int64 // open loop: arrivals that found every slot busy
	elapsed   time.Duration
}

// closedLoop runs Concurrency workers that each send the next request as soon as the
// previous one is answered. With Requests, exactly that many are sent.
func closedLoop(ctx context.Context, t *target, plan *roundPlan, done *atomic.Int64) roundResult {
	opts := plan.opts
	var next atomic.Uint64
	start := time.Now()
	deadline := start.Add(opts.Duration)
	workers := make([]*worker, opts.Concurrency)
	var wg sync.WaitGroup
	for i := range workers {
		w := newWorker(t, plan)
		workers[i] = w
		wg.Go(func() {
			for ctx.Err() == nil {
				idx := next.Add(1) - 1
				if opts.Requests > 0 && idx >= uint64(opts.Requests) {
					return
				}
				now := time.Now()
				if opts.Requests == 0 && !now.Before(deadline) {
					return
				}
				w.do(idx, now)
				done.Add(1)
			}
		})
	}
	wg.Wait()
	return collect(workers, time.Since(start))
}

// openLoop sends requests at Poisson arrival times regardless of how fast answers come.
// Latency counts from the scheduled time, so a slow target cannot hide its queueing by
// slowing the generator down (coordinated omission). At most Concurrency requests are
// outstanding; an arrival that finds none free is dropped and counted.
func openLoop(ctx context.Context, t *target, plan *roundPlan, done *atomic.Int64) roundResult {
	opts := plan.opts
	type arrival struct {
		idx uint64
		at  time.Time
	}
	// outstanding counts arrivals handed out and not yet answered; it never exceeds the
	// channel's capacity, so the dispatcher's send never blocks.
	var outstanding atomic.Int64
	arrivals := make(chan arrival, opts.Concurrency)
	workers := make([]*worker, opts.Concurrency)
	var wg sync.WaitGroup
	for i := range workers {
		w := newWorker(t, plan)
		workers[i] = w
		wg.Go(func() {
			for a := range arrivals {
				w.do(a.idx, a.at)
				outstanding.Add(-1)
				done.Add(1)
			}
		})
	}

	var res roundResult
	start := time.Now()
	sched := newSchedule(opts.Rate, plan.seed)
	timer := time.NewTimer(0)
	<-timer.C
	for idx := uint64(0); ctx.Err() == nil; idx++ {
		offset := sched.next()
		if opts.Requests > 0 && idx >= uint64(opts.Requests) {
			break
		}
		if opts.Requests == 0 && offset >= opts.Duration {
			break
		}
		res.scheduled++
		at := start.Add(offset)
		if wait := time.Until(at); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
			}
		}
		if outstanding.Load() >= int64(opts.Concurrency) {
			res.dropped++
			done.Add(1)
			continue
		}
		outstanding.Add(1)
		arrivals <- arrival{idx, at}
	}
	close(arrivals)
	wg.Wait()
	r := collect(workers, time.Since(start))
	r.scheduled, r.dropped = res.scheduled, res.dropped
	return r
}

// schedule yields arrival offsets from the round start with exponential gaps of mean
// 1/rate: a Poisson process, reproducible from the seed.
type schedule struct {
	rng  *rand.Rand
	rate float64
	at   time.Duration
}

func newSchedule(rate float64, seed uint64) *schedule {
	return &schedule{rng: rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)), rate: rate}
}

func (s *schedule) next() time.Duration {
	s.at += time.Duration(s.rng.ExpFloat64() / s.rate * float64(time.Second))
	return s.at
}

func collect(workers []*worker, elapsed time.Duration) roundResult {
	var res roundResult
	for _, w := range workers {
		res.stats.merge(&w.stats)
	}
	res.elapsed = elapsed
	return res
}
