package router

import (
	"math/rand/v2"

	"pdlb/proxy"
)

// Selector is a selection policy: it picks one backend among candidates,
// considering only those ok accepts. It returns nil when none is acceptable.
// Policies are small types behind this one method so that later ones
// (least-loaded, prefix-aware) slot in without touching the request path.
type Selector interface {
	Select(candidates []*proxy.Backend, ok func(*proxy.Backend) bool) *proxy.Backend
}

// RandomSelector picks uniformly among acceptable backends (SGLang's mini
// balancer does the same; it is also the least surprising default).
type RandomSelector struct{}

var _ Selector = RandomSelector{}

// Select implements Selector with one pass of reservoir sampling.
func (RandomSelector) Select(candidates []*proxy.Backend, ok func(*proxy.Backend) bool) *proxy.Backend {
	var pick *proxy.Backend
	n := 0
	for _, b := range candidates {
		if !ok(b) {
			continue
		}
		n++
		if n == 1 || rand.IntN(n) == 0 {
			pick = b
		}
	}
	return pick
}
