package router

import (
	"context"
	"math/rand/v2"
	"time"

	"pdlb/proxy"
)

// backoff is exponential with full jitter in [d/2, d].
func backoff(initial, maxDelay time.Duration, attempt int) time.Duration {
	d := initial << (attempt - 1)
	if d <= 0 || d > maxDelay {
		d = maxDelay
	}
	if d <= 0 {
		return 0
	}
	return d/2 + rand.N(d/2+1)
}

// backoff waits d before the next attempt, on the Router's clock. It
// returns false, at once, when the wait would pass the request's deadline,
// when the client goes away meanwhile, or when pdlb shuts down: then no
// further attempt is made.
func (q *request) backoff(d time.Duration) bool {
	clock := q.r.clock
	if !clock.Now().Add(d).Before(q.deadline) {
		return false
	}
	ctx, cancel := context.WithCancel(q.r.stopping)
	defer cancel()
	stop := proxy.WatchClient(q.conn, cancel)
	defer stop()
	if clock.Sleep(ctx, d) != nil {
		if q.r.stopping.Err() == nil {
			q.status, q.err = statusClientGone, proxy.ErrClientGone
		}
		return false
	}
	return true
}
