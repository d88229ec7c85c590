package policy

import (
	"math"

	"github.com/cespare/xxhash/v2"

	"pdlb/config"
	"pdlb/proxy"
)

// rendezvous picks a key's backend by rendezvous (highest random weight)
// hashing with bounded loads; prefix_hash and consistent_hashing differ
// only in where the key comes from.
//
// Every backend gets a score for the key, a hash of the key's hash and the
// backend's normalised URL; the key's order is the backends by descending
// score, and its home is the first. Rendezvous needs no ring to build or
// keep in step with the pool, moves only the keys of a backend that leaves
// (a backend that joins takes 1/n of the keys, each from its old home), and
// costs O(n) per pick for the tens of backends pdlb serves. Nothing in it is random or learnt, so every
// pdlb replica with the same backends orders a key alike; only the loads
// that bound it are each replica's own (its requests in flight).
//
// The bound is Mirrokni, Thorup and Zadimoghaddam's: a backend takes the
// key only while its requests in flight are below ceil(loadFactor × (in
// flight over the acceptable backends + 1) ÷ acceptable backends), the +1
// being the request at hand; the key goes to the first backend of its
// order under the bound. A hot key thus spills to its second backend, the
// same one every time, rather than to whichever is idle.
type rendezvous struct {
	loadFactor float64
	// reasonKey is "<role>_hash_rank": the chosen backend's place in the
	// key's order over all of the role's backends, 0 for its home, -1 for a
	// request without a key.
	reasonKey string
	// keyless picks for requests without a key.
	keyless *PowerOfTwo
}

func newRendezvous(role proxy.Role, loadFactor float64) rendezvous {
	return rendezvous{loadFactor: loadFactor, reasonKey: role.String() + "_hash_rank", keyless: newPowerOfTwo(role, config.PowerOfTwo{})}
}

// rendezvousCand is one candidate of a pick.
type rendezvousCand struct {
	score uint64
	load  int64
	ok    bool
}

// rendezvousStack is how many candidates a pick scores on the stack; a
// larger pool allocates one slice per pick.
const rendezvousStack = 64

// pick returns the first acceptable backend under the bound in key's
// order, or nil when ok accepts none.
func (h *rendezvous) pick(key uint64, cands []*proxy.Backend, ok func(*proxy.Backend) bool) (*proxy.Backend, Reason) {
	var buf [rendezvousStack]rendezvousCand
	s := buf[:0]
	if len(cands) > rendezvousStack {
		s = make([]rendezvousCand, 0, len(cands))
	}
	// One pass asks ok and reads the loads once, so the bound and the
	// choice see the same numbers.
	n, total := 0, int64(0)
	for _, b := range cands {
		c := rendezvousCand{score: rendezvousScore(key, b)}
		if ok(b) {
			c.ok, c.load = true, b.InFlight()
			n++
			total += c.load
		}
		s = append(s, c)
	}
	if n == 0 {
		return nil, Reason{}
	}
	// The least loaded acceptable backend is always under the bound (its
	// load is at most total/n < (total+1)/n ≤ bound, as loadFactor ≥ 1),
	// so best is found.
	bound := loadBound(h.loadFactor, total, n)
	best := -1
	for i, c := range s {
		if c.ok && c.load < bound && (best < 0 || c.score > s[best].score) {
			best = i
		}
	}
	rank := 0
	for _, c := range s {
		if c.score > s[best].score {
			rank++
		}
	}
	return cands[best], Reason{h.reasonKey, float64(rank)}
}

// pickKeyless serves a request without a key: the less loaded of two
// random acceptable backends, as power_of_two, with rank -1 in the log.
func (h *rendezvous) pickKeyless(req Request, cands []*proxy.Backend, ok func(*proxy.Backend) bool) (*proxy.Backend, Reason) {
	b, _ := h.keyless.Pick(req, cands, ok)
	if b == nil {
		return nil, Reason{}
	}
	return b, Reason{h.reasonKey, -1}
}

// loadBound is the bound: a backend takes a key while its load is below it.
func loadBound(loadFactor float64, total int64, n int) int64 {
	return int64(math.Ceil(loadFactor * float64(total+1) / float64(n)))
}

// rendezvousScore is b's weight for the key: the key's hash mixed with the
// hash of b's normalised URL (Backend.Key, the same in every replica
// however its config spells the URL). The mix is SplitMix64's finaliser, a
// bijection that spreads every input bit over the output, so the order of
// two backends is a fair coin over keys.
func rendezvousScore(key uint64, b *proxy.Backend) uint64 {
	x := key ^ xxhash.Sum64String(b.Key())
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// validLoadFactor reports whether f can bound loads (config validation
// refuses other values first).
func validLoadFactor(f float64) bool {
	return !math.IsNaN(f) && !math.IsInf(f, 0) && f >= 1
}
