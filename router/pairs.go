package router

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"pdlb/proxy"
)

// PairRule is when a prefill–decode pair is avoided (breaker.pair_*):
// after Failures pair faults within Window, for Cooldown. Failures 0
// turns pair health off.
type PairRule struct {
	Failures         int
	Window, Cooldown time.Duration
}

// Pair names a prefill and a decode by URL.
type Pair struct{ Prefill, Decode string }

// pairHealth remembers the failures that belong to a pairing rather than
// to either engine (proxy.UpstreamError.PairFault: the decode could not
// get the prefill's KV) and avoids a pair that keeps failing while both
// engines serve every other pair. The request path reads only the avoided
// set, an immutable snapshot behind one atomic load, nil while no pair is
// avoided: with no failing pair, pair health costs a request one load.
type pairHealth struct {
	now func() time.Time

	mu     sync.Mutex
	rule   PairRule
	recent map[Pair][]time.Time // faults within the window, oldest first
	faults map[Pair]uint64      // every fault, for pdlb_pair_failures_total

	avoided atomic.Pointer[avoidedPairs]
}

// avoidedPairs is a snapshot of the avoided pairs: until when each is
// avoided, and the latest of those (past it, the snapshot is stale).
type avoidedPairs struct {
	until  map[Pair]time.Time
	latest time.Time
}

func newPairHealth(rule PairRule, now func() time.Time) *pairHealth {
	return &pairHealth{now: now, rule: rule, recent: map[Pair][]time.Time{}, faults: map[Pair]uint64{}}
}

// setRule applies a reloaded rule. Pairs avoided under the old rule stay
// avoided until their cool-down ends; turning pair health off ends them.
func (h *pairHealth) setRule(rule PairRule) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rule = rule
	if rule.Failures == 0 {
		clear(h.recent)
		h.avoided.Store(nil)
	}
}

// anyAvoided reports, with one load, whether some pair may be avoided (the
// request path's first read; snapshot then tells which, at now).
func (h *pairHealth) anyAvoided() bool { return h.avoided.Load() != nil }

// snapshot returns the avoided pairs in force at now, nil when none.
func (h *pairHealth) snapshot(now time.Time) *avoidedPairs {
	a := h.avoided.Load()
	if a == nil || now.Before(a.latest) {
		return a
	}
	h.expire(now)
	return h.avoided.Load()
}

// avoids reports whether a avoids the pair of p and d at now.
func (a *avoidedPairs) avoids(p, d *proxy.Backend, now time.Time) bool {
	until, ok := a.until[Pair{p.URL, d.URL}]
	return ok && now.Before(until)
}

// failed counts a pair fault of p and d. It reports whether the pair is
// avoided from now on (this fault reached the rule's count).
func (h *pairHealth) failed(p, d string) (avoided bool, until time.Time) {
	now := h.now()
	k := Pair{p, d}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.faults[k]++
	r := h.rule
	if r.Failures == 0 {
		return false, time.Time{}
	}
	if a := h.avoided.Load(); a != nil && now.Before(a.until[k]) {
		return false, time.Time{} // already avoided: a request that chose it before
	}
	cut := now.Add(-r.Window)
	times := slices.DeleteFunc(h.recent[k], func(t time.Time) bool { return !t.After(cut) })
	times = append(times, now)
	if len(times) < r.Failures {
		h.recent[k] = times
		return false, time.Time{}
	}
	delete(h.recent, k) // after the cool-down it starts afresh
	until = now.Add(r.Cooldown)
	h.store(now, func(m map[Pair]time.Time) { m[k] = until })
	return true, until
}

// expire drops the pairs whose cool-down has ended.
func (h *pairHealth) expire(now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.store(now, func(map[Pair]time.Time) {})
}

// store publishes a new snapshot: the current one's pairs still avoided at
// now, changed by change. Called with h.mu held.
func (h *pairHealth) store(now time.Time, change func(map[Pair]time.Time)) {
	m := map[Pair]time.Time{}
	if a := h.avoided.Load(); a != nil {
		for k, until := range a.until {
			if now.Before(until) {
				m[k] = until
			}
		}
	}
	change(m)
	if len(m) == 0 {
		h.avoided.Store(nil)
		return
	}
	a := &avoidedPairs{until: m}
	for _, until := range m {
		if until.After(a.latest) {
			a.latest = until
		}
	}
	h.avoided.Store(a)
}

// AvoidedPair is a pair avoided now, as GET /workers and the metrics show it.
type AvoidedPair struct {
	Pair
	Until time.Time
}

// Avoided lists the pairs avoided now.
func (h *pairHealth) Avoided() []AvoidedPair {
	now := h.now()
	a := h.snapshot(now)
	if a == nil {
		return nil
	}
	var out []AvoidedPair
	for k, until := range a.until {
		if now.Before(until) {
			out = append(out, AvoidedPair{k, until})
		}
	}
	slices.SortFunc(out, func(x, y AvoidedPair) int { return comparePairs(x.Pair, y.Pair) })
	return out
}

// Faults returns the count of pair faults of every pair that had one.
func (h *pairHealth) Faults() map[Pair]uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.faults)
}

// observePairs writes pdlb_pairs_avoided and pdlb_pair_failures_total at
// scrape time.
func (m *Metrics) observePairs(h *pairHealth) {
	if m == nil {
		return
	}
	m.AddWriter(func(w io.Writer) {
		metrics.WriteGaugeUint64(w, "pdlb_pairs_avoided", uint64(len(h.Avoided())))
		faults := h.Faults()
		pairs := slices.SortedFunc(maps.Keys(faults), comparePairs)
		for _, k := range pairs {
			fmt.Fprintf(w, "pdlb_pair_failures_total{prefill=%s,decode=%s} %d\n", strconv.Quote(k.Prefill), strconv.Quote(k.Decode), faults[k])
		}
	})
}

func comparePairs(x, y Pair) int {
	return cmp.Or(cmp.Compare(x.Prefill, y.Prefill), cmp.Compare(x.Decode, y.Decode))
}
