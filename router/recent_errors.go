package router

import (
	"sync"
	"time"
)

// recentErrorsKept is how many failed requests RecentErrors keeps.
const recentErrorsKept = 20

// RecentError is one failed request as the status page lists it.
type RecentError struct {
	Time      time.Time
	RequestID string
	Route     string
	Status    int
	// Cause is the error the request's warn line carries; formatted only
	// when read (Cause.Error()), never on the request path.
	Cause   error
	Prefill string
	Decode  string
}

// recentErrors is a ring of the last failed requests, fed where a request's
// warn line is written. Adding copies a few words under a mutex: nothing
// is formatted or allocated for a failure.
type recentErrors struct {
	mu   sync.Mutex
	ring [recentErrorsKept]RecentError
	n    int // how many were ever added
}

func (e *recentErrors) add(r RecentError) {
	e.mu.Lock()
	e.ring[e.n%len(e.ring)] = r
	e.n++
	e.mu.Unlock()
}

// list returns the kept errors, newest first.
func (e *recentErrors) list() []RecentError {
	e.mu.Lock()
	defer e.mu.Unlock()
	k := min(e.n, len(e.ring))
	out := make([]RecentError, 0, k)
	for i := 1; i <= k; i++ {
		out = append(out, e.ring[(e.n-i)%len(e.ring)])
	}
	return out
}

// RecentErrors returns the last failed requests (5xx, clients that left,
// streams broken after their 200: those logged at warn), newest first.
func (r *Router) RecentErrors() []RecentError { return r.errors.list() }
