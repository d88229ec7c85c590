package policy

import (
	"math/rand/v2"

	"pdlb/proxy"
)

// Random picks uniformly among the acceptable backends: SGLang's mini
// balancer does the same, and it needs no state.
type Random struct{}

var _ Policy = Random{}

// Pick implements Policy with one pass of reservoir sampling.
func (Random) Pick(_ Request, cands []*proxy.Backend, ok func(*proxy.Backend) bool) (*proxy.Backend, Reason) {
	var pick *proxy.Backend
	n := 0
	for _, b := range cands {
		if !ok(b) {
			continue
		}
		n++
		if n == 1 || rand.IntN(n) == 0 {
			pick = b
		}
	}
	return pick, Reason{}
}
