package router

import (
	"math/rand/v2"
	"strconv"

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

// pickPair selects a prefill and a decode for req among the available
// backends not in exclude (those that failed earlier attempts), with their
// breakers' admission. It returns a message when no pair is available.
func (r *Router) pickPair(req *pdRequest, exclude []*proxy.Backend) (proxy.Ticket, proxy.Ticket, string) {
	ok := func(b *proxy.Backend) bool { return r.pool.Available(b) && !contains(exclude, b) }
	pt, dt, msg := r.pickPairAmong(ok)
	if msg != "" && req.rankField != "" && r.info != nil {
		// A request that names a prefill DP rank may wait (bounded by
		// bootstrap.info_wait, in checkRank) for a prefill still registering,
		// so the very first request of a fresh deployment succeeds. Other
		// requests get their 503 at once.
		registering := func(b *proxy.Backend) bool {
			return b.Role == proxy.Prefill && !r.pool.RegistryReady(b) && r.pool.AvailableIgnoringRegistry(b) && !contains(exclude, b)
		}
		pt, dt, msg = r.pickPairAmong(func(b *proxy.Backend) bool { return ok(b) || registering(b) })
	}
	return pt, dt, msg
}

// pickPairAmong selects a prefill and a decode whose breakers admit a
// request. A backend whose breaker refuses at admission (half-open probes
// used up) is skipped and another one tried.
func (r *Router) pickPairAmong(ok func(*proxy.Backend) bool) (proxy.Ticket, proxy.Ticket, string) {
	pt, why := r.pickOne(proxy.Prefill, ok)
	if why != "" {
		return pt, pt, why
	}
	dt, why := r.pickOne(proxy.Decode, ok)
	if why != "" {
		pt.Release()
		return pt, dt, why
	}
	return pt, dt, ""
}

func (r *Router) pickOne(role proxy.Role, ok func(*proxy.Backend) bool) (proxy.Ticket, string) {
	all := r.pool.Backends(role)
	var refused []*proxy.Backend
	for {
		b := r.selector.Select(all, func(b *proxy.Backend) bool { return ok(b) && !contains(refused, b) })
		if b == nil {
			return proxy.Ticket{}, noBackendMessage(role, len(all))
		}
		if t, admitted := b.Acquire(); admitted {
			return t, ""
		}
		refused = append(refused, b)
	}
}

func noBackendMessage(role proxy.Role, n int) string {
	if n == 0 {
		return "no " + role.String() + " backend configured"
	}
	return "no " + role.String() + " backend available: all " + strconv.Itoa(n) + " are unhealthy, draining, not registered or behind an open circuit breaker"
}

func contains(list []*proxy.Backend, b *proxy.Backend) bool {
	for _, x := range list {
		if x == b {
			return true
		}
	}
	return false
}
