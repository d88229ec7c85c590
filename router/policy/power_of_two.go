package policy

import (
	"math/rand/v2"

	"pdlb/config"
	"pdlb/proxy"
)

// PowerOfTwo draws two acceptable backends at random and takes the less
// loaded: nearly the balance of least-loaded without every balancer herding
// onto the same backend. Load is pdlb's own count of requests in flight or,
// with engine_load, the larger of that and the engine's own count of the
// requests it runs and queues (which includes other balancers' requests).
type PowerOfTwo struct {
	// reasonKey names the load of the chosen backend in the log line.
	reasonKey  string
	engineLoad bool
}

var _ Policy = (*PowerOfTwo)(nil)

func newPowerOfTwo(role proxy.Role, c config.PowerOfTwo) *PowerOfTwo {
	return &PowerOfTwo{reasonKey: role.String() + "_load", engineLoad: c.EngineLoad}
}

// load is b's load as the policy compares it.
func (p *PowerOfTwo) load(b *proxy.Backend) int64 {
	n := b.InFlight()
	if p.engineLoad {
		n = max(n, b.EngineLoad())
	}
	return n
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
		return a, Reason{p.reasonKey, float64(p.load(a))}
	}
	la, lb := p.load(a), p.load(b)
	if lb < la || (lb == la && rand.IntN(2) == 0) {
		a, la = b, lb
	}
	return a, Reason{p.reasonKey, float64(la)}
}
