package proxy

import (
	"sync/atomic"
	"time"

	"github.com/tidwall/gjson"
)

// dpLoad counts the requests in flight on each data-parallel rank of an
// engine (policy.dp_aware), once its DP size is known: for a prefill from
// its registry, for a decode from its /server_info.
type dpLoad struct {
	inflight []atomic.Int64
}

// SetDPSize records the engine's DP size (ranks [0, n)). A new size starts
// fresh counters; requests counted on the old ones settle there. The same
// size keeps the counters, also when the first requests to learn it race
// (each used to store counters of its own, and the requests counted on the
// ones replaced were lost from GET /workers and from the balance).
func (b *Backend) SetDPSize(n int) {
	if n < 1 {
		return
	}
	for {
		old := b.dp.Load()
		if old != nil && len(old.inflight) == n {
			return
		}
		if b.dp.CompareAndSwap(old, &dpLoad{inflight: make([]atomic.Int64, n)}) {
			return
		}
	}
}

// DPSize is the engine's DP size, 0 while unknown.
func (b *Backend) DPSize() int {
	if d := b.dp.Load(); d != nil {
		return len(d.inflight)
	}
	return 0
}

// DPInFlight returns the requests in flight per DP rank (nil while the DP
// size is unknown), for GET /workers.
func (b *Backend) DPInFlight() []int64 {
	d := b.dp.Load()
	if d == nil {
		return nil
	}
	out := make([]int64, len(d.inflight))
	for i := range d.inflight {
		out[i] = d.inflight[i].Load()
	}
	return out
}

// TakeLeastLoadedDPRank counts the ticket's request on its backend's least
// loaded DP rank (the lowest on a tie) until the ticket is settled, and
// returns it; -1 unless the backend's DP size is size (unknown, or changed
// since the caller read it: a rank of another size must not be sent). The
// choice and the count are one step: requests choosing at once spread over
// the ranks rather than all taking the one that was least loaded when each
// looked.
func (t *Ticket) TakeLeastLoadedDPRank(size int) int {
	d := t.b.dp.Load()
	if d == nil || len(d.inflight) != size {
		return -1
	}
	for {
		best, load := 0, d.inflight[0].Load()
		for i := 1; i < len(d.inflight); i++ {
			if n := d.inflight[i].Load(); n < load {
				best, load = i, n
			}
		}
		if d.inflight[best].CompareAndSwap(load, load+1) {
			t.dp, t.dpRank = d, best
			return best
		}
	}
}

func (t Ticket) settleDPRank() {
	if t.dp != nil {
		t.dp.inflight[t.dpRank].Add(-1)
	}
}

// learnDPSize reads an engine's DP size from its /server_info: SGLang lists
// one internal state per DP rank (SGLang's own balancer counts them the
// same way for its external DP routing). Engines older than 2026-04 only
// answer /get_server_info.
func learnDPSize(b *Backend, timeout time.Duration) {
	for _, path := range [...]string{"/server_info", "/get_server_info"} {
		res, err := b.Call("GET", path, nil, timeout)
		if err != nil {
			return
		}
		if res.Status == 200 {
			if states := gjson.GetBytes(res.Body, "internal_states"); states.IsArray() {
				b.SetDPSize(max(len(states.Array()), 1))
			}
			return
		}
	}
}
