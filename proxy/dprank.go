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
// fresh counters; requests counted on the old ones settle there.
func (b *Backend) SetDPSize(n int) {
	if n < 1 || b.DPSize() == n {
		return
	}
	b.dp.Store(&dpLoad{inflight: make([]atomic.Int64, n)})
}

// DPSize is the engine's DP size, 0 while unknown.
func (b *Backend) DPSize() int {
	if d := b.dp.Load(); d != nil {
		return len(d.inflight)
	}
	return 0
}

// LeastLoadedDPRank is the DP rank with the fewest requests in flight (the
// lowest such rank on a tie), or -1 while the DP size is unknown.
func (b *Backend) LeastLoadedDPRank() int {
	d := b.dp.Load()
	if d == nil {
		return -1
	}
	best, load := 0, d.inflight[0].Load()
	for i := 1; i < len(d.inflight); i++ {
		if n := d.inflight[i].Load(); n < load {
			best, load = i, n
		}
	}
	return best
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

// TakeDPRank counts the ticket's request on rank of its backend until the
// ticket is settled (Done or Release). A rank outside the known size, or
// an unknown size, counts nothing.
func (t *Ticket) TakeDPRank(rank int) {
	d := t.b.dp.Load()
	if d == nil || rank < 0 || rank >= len(d.inflight) {
		return
	}
	d.inflight[rank].Add(1)
	t.dp, t.dpRank = d, rank
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
