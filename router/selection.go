package router

import (
	"slices"
	"sync"
	"time"

	"pdlb/proxy"
)

// selection is the state of one pair selection (pickPair): which backends
// its policies may pick. The policies ask through a func value
// (policy.Policy's Pick(req, cands, ok)); closures built per request for
// it escaped into that interface call, each a heap allocation, with the
// slices they captured (5 allocations per pair, 9 with avoided pairs).
// A selection instead comes from a sync.Pool with its filter, accepts,
// bound once to the func field ok when it is made, so handing s.ok to a
// policy allocates nothing, and its slices keep their capacity between
// requests.
//
// It must not hold the request (q): the request value stays on servePD's
// stack (TestRequestValueStaysOnTheStack).
type selection struct {
	r *Router
	// ok is accepts, bound once (newSelection): what the policies get.
	ok func(*proxy.Backend) bool

	// exclude are the backends that failed earlier attempts.
	exclude []*proxy.Backend
	// registering also accepts prefills still registering (pickPair, for
	// a request naming a prefill DP rank).
	registering bool

	// avoiding is set during pickPairAmong's first round, which offers
	// the prefills one by one: the prefills in tried (offered and left
	// without a decode) are passed over and, once prefill is chosen, the
	// decodes it pairs badly with (avoided by pair health at now, or in
	// failed: this request's failed pairs).
	avoiding bool
	tried    []*proxy.Backend
	prefill  *proxy.Backend
	avoided  *avoidedPairs
	failed   []Pair
	now      time.Time

	// refused are the backends whose breaker refused admission within
	// one pickOne.
	refused []*proxy.Backend
}

var selections = sync.Pool{New: func() any {
	s := new(selection)
	s.ok = s.accepts // the one allocation of the method value, per pooled selection
	return s
}}

// newSelection takes a selection for r from the pool, accepting the
// available backends not in exclude. Give it back with release.
func (r *Router) newSelection(exclude []*proxy.Backend) *selection {
	s := selections.Get().(*selection)
	s.r, s.exclude = r, exclude
	return s
}

// release resets s, keeping its slices' capacity (stopAvoiding and
// clearRefused have emptied them, backends cleared), and puts it back in
// the pool.
func (s *selection) release() {
	*s = selection{ok: s.ok, tried: s.tried[:0], refused: s.refused[:0]}
	selections.Put(s)
}

// accepts is the filter the policies get (as s.ok). It checks, in the
// order the closures it replaces did: availability (or, when
// registering, a prefill still registering), not in exclude; when
// avoiding, not tried and no avoided pair with the chosen prefill; not
// refused by its breaker.
func (s *selection) accepts(b *proxy.Backend) bool {
	if !s.available(b) {
		return false
	}
	if s.avoiding {
		if contains(s.tried, b) {
			return false
		}
		if s.prefill != nil && s.avoids(s.prefill, b) {
			return false
		}
	}
	return !contains(s.refused, b)
}

func (s *selection) available(b *proxy.Backend) bool {
	if contains(s.exclude, b) {
		return false
	}
	pool := s.r.pool
	return pool.Available(b) || s.registering && b.Role == proxy.Prefill && !pool.RegistryReady(b) && pool.AvailableIgnoringRegistry(b)
}

// avoids reports whether the pair of p and d failed this request already
// or is avoided by pair health.
func (s *selection) avoids(p, d *proxy.Backend) bool {
	return slices.Contains(s.failed, Pair{p.URL, d.URL}) || s.avoided != nil && s.avoided.avoids(p, d, s.now)
}

// avoid starts pickPairAmong's first round: pairs in failed or avoided
// (at now) are passed over, and so are the prefills added to tried.
func (s *selection) avoid(avoided *avoidedPairs, failed []Pair, now time.Time) {
	s.avoiding, s.avoided, s.failed, s.now = true, avoided, failed, now
}

// stopAvoiding ends the first round: every available pair is accepted.
func (s *selection) stopAvoiding() {
	clear(s.tried)
	s.avoiding, s.tried, s.prefill, s.avoided, s.failed = false, s.tried[:0], nil, nil, nil
}

// clearRefused forgets the backends refused within one pickOne.
func (s *selection) clearRefused() {
	clear(s.refused)
	s.refused = s.refused[:0]
}
