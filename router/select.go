package router

import (
	"slices"
	"strconv"

	"pdlb/config"
	"pdlb/proxy"
	"pdlb/router/policy"
)

// policies are the selection policies of the two roles.
type policies struct {
	prefill, decode policy.Policy
	// keyHeader names the request header a keyed policy routes by
	// (policy.Request.Key); "" when none is in force, and no header is read.
	keyHeader string
}

// newPolicies builds the configured policies. The names were validated
// with the config, so New cannot fail here; random stands in if it does.
func newPolicies(c config.Policy) *policies {
	build := func(name string, role proxy.Role) policy.Policy {
		p, err := policy.New(name, role, c)
		if err != nil {
			return policy.Random{}
		}
		return p
	}
	ps := &policies{prefill: build(c.Prefill, proxy.Prefill), decode: build(c.Decode, proxy.Decode)}
	for _, p := range [2]policy.Policy{ps.prefill, ps.decode} {
		if k, keyed := p.(policy.Keyed); keyed {
			ps.keyHeader = k.KeyHeader()
		}
	}
	return ps
}

// pickPair decides the request's prefill and decode in one step: the
// prefill policy picks among the available prefills, then the decode
// policy among the available decodes, knowing the prefill. Backends in
// exclude (those that failed earlier attempts) are not picked; one whose
// breaker refuses at admission (half-open probes used up) is passed over.
// It returns a message when no pair is available.
func (r *Router) pickPair(q *request, exclude []*proxy.Backend) (proxy.Ticket, proxy.Ticket, string) {
	req := &q.parsed
	pr := q.policyRequest()
	ok := func(b *proxy.Backend) bool { return r.pool.Available(b) && !contains(exclude, b) }
	pt, dt, msg := r.pickPairAmong(q, pr, ok)
	if msg != "" && req.rankField != "" && r.info != nil {
		// A request that names a prefill DP rank may wait (bounded by
		// bootstrap.info_wait, in checkRank) for a prefill still registering,
		// so the very first request of a fresh deployment succeeds. Other
		// requests get their 503 at once.
		registering := func(b *proxy.Backend) bool {
			return b.Role == proxy.Prefill && !r.pool.RegistryReady(b) && r.pool.AvailableIgnoringRegistry(b) && !contains(exclude, b)
		}
		pt, dt, msg = r.pickPairAmong(q, pr, func(b *proxy.Backend) bool { return ok(b) || registering(b) })
	}
	return pt, dt, msg
}

func (r *Router) pickPairAmong(q *request, pr policy.Request, ok func(*proxy.Backend) bool) (proxy.Ticket, proxy.Ticket, string) {
	now := r.clock.Now()
	avoided := r.pairs.snapshot(now)
	if avoided == nil && len(q.failedPairs) == 0 {
		pt, dt, _, why := r.pickPairWith(q, pr, ok, nil)
		return pt, dt, why
	}
	// Some pairs are avoided (pair health) or failed this request already:
	// offer the prefills one by one until one has a decode it may pair
	// with, then, if none has, take an avoided pair rather than none.
	// The closure must not capture q: it escapes (into the policies), and
	// q with it would move every request to the heap (about 850 bytes).
	failed := q.failedPairs
	avoids := func(p, d *proxy.Backend) bool {
		return slices.Contains(failed, Pair{p.URL, d.URL}) || avoided != nil && avoided.avoids(p, d, now)
	}
	var tried []*proxy.Backend
	for {
		pt, dt, p, why := r.pickPairWith(q, pr, func(b *proxy.Backend) bool { return ok(b) && !contains(tried, b) }, avoids)
		if why == "" {
			return pt, dt, ""
		}
		if p == nil {
			break // no prefill left
		}
		tried = append(tried, p)
	}
	pt, dt, _, why := r.pickPairWith(q, pr, ok, nil)
	return pt, dt, why
}

// pickPairWith picks a prefill, then a decode that avoids (when set) does
// not rule out with it. Without a decode it releases the prefill and
// returns which prefill it was, with the reason.
func (r *Router) pickPairWith(q *request, pr policy.Request, ok func(*proxy.Backend) bool, avoids func(p, d *proxy.Backend) bool) (proxy.Ticket, proxy.Ticket, *proxy.Backend, string) {
	pols := r.policies.Load()
	pt, why := r.pickOne(proxy.Prefill, pols.prefill, pr, ok, &q.prefillReason)
	if why != "" {
		return pt, pt, nil, why
	}
	p := pt.Backend()
	prefillReq := pr
	pr.Prefill = p
	decodeOK := ok
	if avoids != nil {
		decodeOK = func(d *proxy.Backend) bool { return ok(d) && !avoids(p, d) }
	}
	dt, why := r.pickOne(proxy.Decode, pols.decode, pr, decodeOK, &q.decodeReason)
	if why != "" {
		pt.Release()
		return proxy.Ticket{}, dt, p, why
	}
	// The policies learn the pair only once it is whole: a prefill offered
	// and given up (no decode, or only avoided ones) holds nothing.
	chosen(pols.prefill, prefillReq, p)
	chosen(pols.decode, pr, dt.Backend())
	return pt, dt, nil, ""
}

// chosen tells a policy that learns from its choices (policy.Observer)
// which backend serves the request.
func chosen(pol policy.Policy, pr policy.Request, b *proxy.Backend) {
	if o, isObserver := pol.(policy.Observer); isObserver {
		o.Chosen(pr, b)
	}
}

// pickOne asks pol for a backend of role and its breaker for admission,
// until one admits or none is left.
func (r *Router) pickOne(role proxy.Role, pol policy.Policy, pr policy.Request, ok func(*proxy.Backend) bool, reason *policy.Reason) (proxy.Ticket, string) {
	all := r.pool.Backends(role)
	var refused []*proxy.Backend
	for {
		b, why := pol.Pick(pr, all, func(b *proxy.Backend) bool { return ok(b) && !contains(refused, b) })
		if b == nil {
			return proxy.Ticket{}, noBackendMessage(role, len(all))
		}
		if t, admitted := b.Acquire(); admitted {
			*reason = why
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
