package router

import (
	"strconv"
	"time"

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
//
// Which backends the policies may pick is kept in a pooled selection
// (selection.go), not in closures: those escaped into the policies'
// interface and cost an allocation each per request.
func (r *Router) pickPair(q *request, exclude []*proxy.Backend) (proxy.Ticket, proxy.Ticket, string) {
	req := &q.parsed
	pr := q.policyRequest()
	s := r.newSelection(exclude)
	defer s.release()
	pt, dt, msg := r.pickPairAmong(q, pr, s)
	if msg != "" && req.rankField != "" && r.info != nil {
		// A request that names a prefill DP rank may wait (bounded by
		// bootstrap.info_wait, in checkRank) for a prefill still registering,
		// so the very first request of a fresh deployment succeeds. Other
		// requests get their 503 at once.
		s.registering = true
		pt, dt, msg = r.pickPairAmong(q, pr, s)
	}
	return pt, dt, msg
}

func (r *Router) pickPairAmong(q *request, pr policy.Request, s *selection) (proxy.Ticket, proxy.Ticket, string) {
	// The common case costs one load (no clock read): no pair avoided.
	var avoided *avoidedPairs
	var now time.Time
	if r.pairs.anyAvoided() {
		now = r.clock.Now()
		avoided = r.pairs.snapshot(now)
	}
	if avoided == nil && len(q.failedPairs) == 0 {
		pt, dt, _, why := r.pickPairWith(q, pr, s)
		return pt, dt, why
	}
	// Some pairs are avoided (pair health) or failed this request already:
	// offer the prefills one by one until one has a decode it may pair
	// with, then, if none has, take an avoided pair rather than none.
	// s takes the request's failed pairs (the slice), never q itself: q
	// would escape with it (into the pool), moving every request to the
	// heap (about 850 bytes).
	s.avoid(avoided, q.failedPairs, now)
	for {
		pt, dt, p, why := r.pickPairWith(q, pr, s)
		if why == "" {
			s.stopAvoiding()
			return pt, dt, ""
		}
		if p == nil {
			break // no prefill left
		}
		s.tried = append(s.tried, p)
	}
	s.stopAvoiding()
	pt, dt, _, why := r.pickPairWith(q, pr, s)
	return pt, dt, why
}

// pickPairWith picks a prefill, then a decode that s accepts with it (when
// s is avoiding, not one of an avoided pair). Without a decode it releases
// the prefill and returns which prefill it was, with the reason.
func (r *Router) pickPairWith(q *request, pr policy.Request, s *selection) (proxy.Ticket, proxy.Ticket, *proxy.Backend, string) {
	pols := r.policies.Load()
	pt, why := r.pickOne(proxy.Prefill, pols.prefill, pr, s, &q.prefillReason)
	if why != "" {
		return pt, pt, nil, why
	}
	p := pt.Backend()
	prefillReq := pr
	pr.Prefill = p
	s.prefill = p
	dt, why := r.pickOne(proxy.Decode, pols.decode, pr, s, &q.decodeReason)
	s.prefill = nil
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
// until one admits or none is left. The policy gets s.ok, which passes
// over the backends refused here (s.refused, reset at each call).
func (r *Router) pickOne(role proxy.Role, pol policy.Policy, pr policy.Request, s *selection, reason *policy.Reason) (proxy.Ticket, string) {
	all := r.pool.Backends(role)
	defer s.clearRefused()
	for {
		b, why := pol.Pick(pr, all, s.ok)
		if b == nil {
			return proxy.Ticket{}, noBackendMessage(role, len(all))
		}
		if t, admitted := b.Acquire(); admitted {
			*reason = why
			return t, ""
		}
		s.refused = append(s.refused, b)
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
