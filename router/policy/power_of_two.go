package policy

import (
	"math/rand/v2"

	"pdlb/proxy"
)

// PowerOfTwo draws two acceptable backends at random and takes the one with
// fewer requests in flight (pdlb's own count): nearly the balance of
// least-loaded without every balancer herding onto the same backend.
type PowerOfTwo struct {
	// reasonKey names the load of the chosen backend in the log line.
	reasonKey string
}

var _ Policy = (*PowerOfTwo)(nil)

func newPowerOfTwo(role proxy.Role) *PowerOfTwo {
	return &PowerOfTwo{reasonKey: role.String() + "_in_flight"}
}

// Pick implements Policy: one pass draws two distinct acceptable backends
// uniformly (reservoir sampling of two).
func (p *PowerOfTwo) Pick(_ Request, cands []*proxy.Backend, ok func(*proxy.Backend) bool) (*proxy.Backend, Reason) {
	var a, b *proxy.Backend
	n := 0
	for _, c := range cands {
		if !ok(c) {
			continue
		}
		n++
		switch {
		case n == 1:
			a = c
		case n == 2:
			b = c
		default:
			if i := rand.IntN(n); i == 0 {
				a = c
			} else if i == 1 {
				b = c
			}
		}
	}
	if b == nil {
		if a == nil {
			return nil, Reason{}
		}
		return a, Reason{p.reasonKey, float64(a.InFlight())}
	}
	if b.InFlight() < a.InFlight() || (b.InFlight() == a.InFlight() && rand.IntN(2) == 0) {
		a = b
	}
	return a, Reason{p.reasonKey, float64(a.InFlight())}
}
