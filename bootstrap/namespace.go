package bootstrap

import (
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// RankInfo is where one prefill rank's KV can be pulled from; it is also
// the per-rank GET /route answer.
type RankInfo struct {
	RankIP   string `json:"rank_ip"`
	RankPort int    `json:"rank_port"`
}

// addr renders the rank as host:port, IPv6 in brackets.
func (ri RankInfo) addr() string { return net.JoinHostPort(ri.RankIP, strconv.Itoa(ri.RankPort)) }

// Namespace is the registry of one prefill instance, identified by the
// bootstrap port its ranks and its decodes use.
//
// Readiness counts DISTINCT ranks: SGLang adds one per PUT, so a restarted
// rank that registers twice could make an instance look ready while another
// rank is still missing (protocol doc §9.4). Here a repeat replaces the
// entry.
type Namespace struct {
	port int

	mu sync.RWMutex
	st NamespaceState
	// rev is the store revision st was read at (0 without a store): states
	// arrive both from this replica's own writes and from the watch, and an
	// older one must not replace a newer one.
	rev int64

	// gen counts changes (registrations, loads, resets), so
	// bootstrap.forget_after can tell a namespace written since a prefill
	// was lost from one left as it was.
	gen atomic.Uint64

	// Read without the lock by the request path and the GET handlers.
	state *readiness
	snap  atomic.Pointer[snapshot] // non-nil iff ready

	dp *dpRankTable
}

// snapshot is everything a ready namespace answers without locking; bodies
// are rendered once per change instead of once per lookup.
type snapshot struct {
	info PrefillInfo
	// sentinel is the current-form answer in the first registrant's era;
	// sentinelFull has all 15 keys (ExtendedSentinel). Often the same slice.
	sentinel     []byte
	sentinelFull []byte
	legacyV04    []byte
	legacyV05    []byte
	legacyFeb    []byte
}

func newNamespace(port int, dp *dpRankTable) *Namespace {
	return &Namespace{port: port, st: NamespaceState{ranks: map[rankKey]RankInfo{}}, state: newReadiness(), dp: dp}
}

// Port is the bootstrap port that names this namespace.
func (ns *Namespace) Port() int { return ns.port }

// register stores one rank (see NamespaceState.register): it returns the
// registration the rank replaced (nil for a new rank) and whether this
// registration made the namespace ready.
func (ns *Namespace) register(r *registration, mayMove bool) (prev *RankInfo, becameReady bool, err error) {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if prev, err = ns.st.register(r, mayMove); err != nil {
		return nil, false, err
	}
	return prev, ns.publish(), nil
}

// load replaces the namespace's state with st, read from a store at rev;
// nil st is an empty namespace (reset: the DP-rank entries go too). A
// state older than the one held is ignored. It reports whether the
// namespace became ready.
func (ns *Namespace) load(st *NamespaceState, rev int64) (becameReady bool) {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if rev != 0 && rev <= ns.rev {
		return false
	}
	ns.rev = rev
	if st == nil {
		ns.st = NamespaceState{ranks: map[rankKey]RankInfo{}}
		ns.dp.clear()
	} else {
		ns.st = *st.clone()
	}
	return ns.publish()
}

// publish makes the state under ns.mu visible to the lock-free readers:
// counts, then the snapshot and readiness. The snapshot is rebuilt on
// every change once ready: page_size/kv_cache_dtype may still go from null
// to a value through a re-registration.
func (ns *Namespace) publish() (becameReady bool) {
	ns.gen.Add(1)
	n, want := ns.st.counts()
	ns.state.setCounts(n, want)
	if want == 0 || n != want {
		ns.snap.Store(nil)
		ns.state.setNotReady()
		return false
	}
	snap := newSnapshot(ns.st.topo)
	ns.snap.Store(snap)
	return ns.state.setReady(&snap.info)
}

// stored returns a copy of the state and its store revision.
func (ns *Namespace) stored() (*NamespaceState, int64) {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	return ns.st.clone(), ns.rev
}

// sameHost compares two rank_ip values as hosts: IP addresses by value, so
// "10.0.0.1" and "::ffff:10.0.0.1", or "fd00::1" and "fd00:0::1", are one
// host; anything else (a hostname) case-insensitively.
func sameHost(a, b string) bool {
	if x, err := netip.ParseAddr(a); err == nil {
		if y, err := netip.ParseAddr(b); err == nil {
			return x.Unmap() == y.Unmap()
		}
	}
	return strings.EqualFold(a, b)
}

// contradiction rejects a registrant whose layout differs from the first
// one's: with first-write-wins (SGLang) such a rank would be stored under a
// layout it does not have and decodes would pull the wrong KV. Only an
// explicit reset (DELETE /route) lets a different topology in.
func (t *topology) contradiction(n *topology) error {
	for _, c := range []struct {
		field    string
		have, is int
	}{{"attn_tp_size", t.tp, n.tp}, {"attn_cp_size", t.cp, n.cp}, {"pp_size", t.pp, n.pp}, {"dp_size", t.dp, n.dp}} {
		if c.have != c.is {
			return badField(c.field, "%d contradicts %d registered by the first rank of this prefill; DELETE /route to reset", c.is, c.have)
		}
	}
	// A decode crashes on a page size or dtype mismatch (§3.3), so two ranks
	// that disagree are a misconfiguration worth refusing loudly.
	if t.pageSize != nil && n.pageSize != nil && *t.pageSize != *n.pageSize {
		return badField("page_size", "%d contradicts %d registered earlier", *n.pageSize, *t.pageSize)
	}
	if t.kvDtype != nil && n.kvDtype != nil && *t.kvDtype != *n.kvDtype {
		return badField("kv_cache_dtype", "%q contradicts %q registered earlier", *n.kvDtype, *t.kvDtype)
	}
	return nil
}

// absorb applies SGLang's "first non-null wins" to the nullable fields.
func (t *topology) absorb(n *topology) {
	if t.pageSize == nil {
		t.pageSize = n.pageSize
	}
	if t.kvDtype == nil {
		t.kvDtype = n.kvDtype
	}
	if t.httpPort == nil {
		t.httpPort = n.httpPort
	}
}

func newSnapshot(t *topology) *snapshot {
	info := PrefillInfo{
		AttnTPSize: t.tp, AttnCPSize: t.cp, DPSize: t.dp, PPSize: t.pp,
		PageSize: t.pageSize, KVCacheDtype: t.kvDtype, FollowBootstrapRoom: t.follow,
		EnableDSACacheLayerSplit: t.dsa, PrefillHTTPPort: t.httpPort,
	}
	full := encodeSentinel(info, true)
	era := full
	if !t.fullInfo {
		era = encodeSentinel(info, false)
	}
	return &snapshot{
		info:         info,
		sentinel:     era,
		sentinelFull: full,
		legacyV04:    encodeLegacyV04(info),
		legacyV05:    encodeLegacyV05(info),
		legacyFeb:    encodeLegacyFeb(info),
	}
}

// lookup returns one rank's address.
func (ns *Namespace) lookup(k rankKey) (RankInfo, bool) {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	ri, ok := ns.st.ranks[k]
	return ri, ok
}

// reset forgets topology, ranks and DP-rank entries so a restarted prefill
// can register a different layout. It returns how many ranks were dropped.
func (ns *Namespace) reset() int {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	n := len(ns.st.ranks)
	ns.st = NamespaceState{ranks: map[rankKey]RankInfo{}}
	ns.dp.clear()
	ns.publish()
	return n
}
