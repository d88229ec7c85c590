package policy

import (
	"sync/atomic"

	"pdlb/proxy"
)

// RoundRobin gives each acceptable backend a request in turn: from the
// position after the previous pick, the first backend ok accepts.
type RoundRobin struct {
	next atomic.Uint64
}

var _ Policy = (*RoundRobin)(nil)

// Pick implements Policy.
func (r *RoundRobin) Pick(_ Request, cands []*proxy.Backend, ok func(*proxy.Backend) bool) (*proxy.Backend, Reason) {
	n := uint64(len(cands))
	if n == 0 {
		return nil, Reason{}
	}
	start := r.next.Add(1) - 1
	for i := range n {
		if b := cands[(start+i)%n]; ok(b) {
			return b, Reason{}
		}
	}
	return nil, Reason{}
}
