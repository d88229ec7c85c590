package bootstrap

import (
	"encoding/json"
	"fmt"
	"maps"
)

// NamespaceState is what one namespace holds: the topology its first
// registrant fixed and every registered rank's address. A Namespace keeps
// one in memory; a Store (etcd, for several pdlb replicas) keeps it as the
// JSON of MarshalJSON. The zero value is an empty namespace.
type NamespaceState struct {
	topo  *topology
	ranks map[rankKey]RankInfo
}

// Ranks is how many ranks have registered.
func (st *NamespaceState) Ranks() int { return len(st.ranks) }

// register stores one rank. All checks run before anything changes, so a
// rejected registration leaves st as it was. It returns the registration
// the rank replaced (nil for a new rank).
//
// Unless mayMove, a rank registered at one rank_ip is not re-registered at
// another (*moveError): in an open registry anyone who can reach the port
// could otherwise point decodes at a host of their choosing to pull KV
// from. A new rank_port on the same host is a rank restarted in place
// (SGLang binds a random ZMQ port per start) and is taken.
func (st *NamespaceState) register(r *registration, mayMove bool) (prev *RankInfo, err error) {
	if old, ok := st.ranks[r.key]; ok {
		if !mayMove && !sameHost(old.RankIP, r.rank.RankIP) {
			return nil, &moveError{key: r.key, from: old, to: r.rank}
		}
		prev = &old
	}
	if t := st.topo; t != nil {
		if err := t.contradiction(&r.topo); err != nil {
			return nil, err
		}
		t.absorb(&r.topo)
	} else {
		t := r.topo
		st.topo = &t
	}
	if st.ranks == nil {
		st.ranks = map[rankKey]RankInfo{}
	}
	st.ranks[r.key] = r.rank
	return prev, nil
}

// counts is ranks registered and expected (0 until the topology is known).
func (st *NamespaceState) counts() (registered, expected int) {
	if st.topo == nil {
		return len(st.ranks), 0
	}
	return len(st.ranks), st.topo.ranks()
}

// clone is a deep copy: a Namespace's state is replaced, never shared.
func (st *NamespaceState) clone() *NamespaceState {
	c := &NamespaceState{ranks: maps.Clone(st.ranks)}
	if st.topo != nil {
		t := *st.topo
		c.topo = &t
	}
	return c
}

// stateJSON is the stored form: versioned, and explicit about every field,
// so a pdlb of another version reading the same etcd refuses what it does
// not understand instead of guessing.
type stateJSON struct {
	V     int        `json:"v"`
	Topo  *topoJSON  `json:"topology"`
	Ranks []rankJSON `json:"ranks"`
}

type topoJSON struct {
	TP       int     `json:"attn_tp_size"`
	CP       int     `json:"attn_cp_size"`
	PP       int     `json:"pp_size"`
	DP       int     `json:"dp_size"`
	PageSize *int    `json:"page_size"`
	KVDtype  *string `json:"kv_cache_dtype"`
	Follow   bool    `json:"follow_bootstrap_room"`
	DSA      bool    `json:"enable_dsa_cache_layer_split"`
	HTTPPort *int    `json:"prefill_http_port"`
	FullInfo bool    `json:"full_info"`
}

type rankJSON struct {
	DP int `json:"dp"`
	CP int `json:"cp"`
	TP int `json:"tp"`
	PP int `json:"pp"`
	RankInfo
}

// stateVersion is the stored form's version; bump it on any change a
// reader of the old form would misread.
const stateVersion = 1

// MarshalJSON is the stored form of the state.
func (st *NamespaceState) MarshalJSON() ([]byte, error) {
	out := stateJSON{V: stateVersion, Ranks: make([]rankJSON, 0, len(st.ranks))}
	if t := st.topo; t != nil {
		out.Topo = &topoJSON{TP: t.tp, CP: t.cp, PP: t.pp, DP: t.dp, PageSize: t.pageSize, KVDtype: t.kvDtype,
			Follow: t.follow, DSA: t.dsa, HTTPPort: t.httpPort, FullInfo: t.fullInfo}
	}
	for k, ri := range st.ranks {
		out.Ranks = append(out.Ranks, rankJSON{DP: k.dp, CP: k.cp, TP: k.tp, PP: k.pp, RankInfo: ri})
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads the stored form, with the checks a registration
// passes: whatever else can write to etcd must not make the registry
// answer a rank outside the topology, or panic.
func (st *NamespaceState) UnmarshalJSON(b []byte) error {
	var in stateJSON
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	if in.V != stateVersion {
		return fmt.Errorf("stored namespace has version %d, this pdlb reads %d", in.V, stateVersion)
	}
	*st = NamespaceState{}
	if in.Topo != nil {
		t := in.Topo
		st.topo = &topology{tp: t.TP, cp: t.CP, pp: t.PP, dp: t.DP, pageSize: t.PageSize, kvDtype: t.KVDtype,
			follow: t.Follow, dsa: t.DSA, httpPort: t.HTTPPort, fullInfo: t.FullInfo}
		if !st.topo.bounded() {
			return fmt.Errorf("stored topology %d×%d×%d×%d is out of bounds", t.DP, t.CP, t.TP, t.PP)
		}
	} else if len(in.Ranks) > 0 {
		return fmt.Errorf("stored namespace has ranks but no topology")
	}
	st.ranks = make(map[rankKey]RankInfo, len(in.Ranks))
	for _, r := range in.Ranks {
		k := rankKey{dp: r.DP, cp: r.CP, tp: r.TP, pp: r.PP}
		t := st.topo
		if k.dp < 0 || k.cp < 0 || k.tp < 0 || k.pp < 0 || k.dp >= t.dp || k.cp >= t.cp || k.tp >= t.tp || k.pp >= t.pp {
			return fmt.Errorf("stored rank %d/%d/%d/%d is outside the topology", k.dp, k.cp, k.tp, k.pp)
		}
		if _, dup := st.ranks[k]; dup {
			return fmt.Errorf("stored rank %d/%d/%d/%d appears twice", k.dp, k.cp, k.tp, k.pp)
		}
		st.ranks[k] = r.RankInfo
	}
	return nil
}
