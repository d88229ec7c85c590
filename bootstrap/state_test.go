package bootstrap

import (
	"encoding/json"
	"maps"
	"reflect"
	"strings"
	"testing"
)

// storedSeeds are stored namespaces as a replica writes them, and the
// malformed ones another writer of the same etcd could leave.
var storedSeeds = []string{
	`{"v":1,"topology":null,"ranks":[]}`,
	`{"v":1,"topology":{"attn_tp_size":2,"attn_cp_size":1,"pp_size":1,"dp_size":1,"page_size":64,"kv_cache_dtype":"auto","follow_bootstrap_room":true,"enable_dsa_cache_layer_split":false,"prefill_http_port":30000,"full_info":true},"ranks":[{"dp":0,"cp":0,"tp":1,"pp":0,"rank_ip":"10.0.0.1","rank_port":7000}]}`,
	`{"v":1,"topology":{"attn_tp_size":1,"attn_cp_size":1,"pp_size":1,"dp_size":1},"ranks":[{"dp":0,"cp":0,"tp":0,"pp":0,"rank_ip":"::1","rank_port":1}]}`,
	`{"v":2,"topology":null,"ranks":[]}`,
	`{"v":1,"topology":{"attn_tp_size":0,"attn_cp_size":1,"pp_size":1,"dp_size":1},"ranks":[]}`,
	`{"v":1,"topology":{"attn_tp_size":1000000,"attn_cp_size":1000000,"pp_size":1,"dp_size":1},"ranks":[]}`,
	`{"v":1,"topology":{"attn_tp_size":1,"attn_cp_size":1,"pp_size":1,"dp_size":1},"ranks":[{"dp":0,"cp":0,"tp":1,"pp":0,"rank_ip":"a","rank_port":1}]}`,
	`{"v":1,"topology":{"attn_tp_size":1,"attn_cp_size":1,"pp_size":1,"dp_size":1},"ranks":[{"dp":0,"cp":0,"tp":0,"pp":0},{"dp":0,"cp":0,"tp":0,"pp":0}]}`,
	`{"v":1,"topology":null,"ranks":[{"dp":0,"cp":0,"tp":0,"pp":0}]}`,
	`{"v":1,"topology":{"attn_tp_size":1,"attn_cp_size":1,"pp_size":1,"dp_size":1},"ranks":[{"dp":-1,"cp":0,"tp":0,"pp":0}]}`,
	`[]`, `null`, ``,
}

// TestStoredNamespaceRoundTrips: a state a registration built reads back
// equal, and each malformed seed is refused with an error naming why.
func TestStoredNamespaceRoundTrips(t *testing.T) {
	var st NamespaceState
	if err := json.Unmarshal([]byte(storedSeeds[1]), &st); err != nil {
		t.Fatal(err)
	}
	if st.Ranks() != 1 {
		t.Fatalf("read %d ranks, want 1", st.Ranks())
	}
	b, err := json.Marshal(&st)
	if err != nil {
		t.Fatal(err)
	}
	var back NamespaceState
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("reading back %s: %v", b, err)
	}
	if !reflect.DeepEqual(st.topo, back.topo) || !maps.Equal(st.ranks, back.ranks) {
		t.Errorf("round trip changed the state: %s", b)
	}

	for seed, want := range map[int]string{
		3: "version 2", 4: "out of bounds", 5: "out of bounds", 6: "outside the topology",
		7: "appears twice", 8: "no topology", 9: "outside the topology",
	} {
		err := json.Unmarshal([]byte(storedSeeds[seed]), new(NamespaceState))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one saying %q", storedSeeds[seed], err, want)
		}
	}
}

// FuzzStoredNamespace: whatever etcd holds under a namespace's key, reading
// it never panics, and what is accepted is a state a registration could
// have built (every rank inside its topology) that reads back unchanged.
func FuzzStoredNamespace(f *testing.F) {
	for _, s := range storedSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var st NamespaceState
		if err := st.UnmarshalJSON(data); err != nil {
			return
		}
		registered, expected := st.counts()
		if st.topo == nil && registered != 0 || st.topo != nil && registered > expected {
			t.Fatalf("accepted %d ranks for a topology of %d: %s", registered, expected, data)
		}
		b, err := json.Marshal(&st)
		if err != nil {
			t.Fatal(err)
		}
		var back NamespaceState
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("accepted %s but not its own re-encoding %s: %v", data, b, err)
		}
		if !reflect.DeepEqual(st.topo, back.topo) || !maps.Equal(st.ranks, back.ranks) {
			t.Fatalf("re-encoding %s changed the state", data)
		}
	})
}
