package bootstrap

import (
	"encoding/json"
	"slices"
	"testing"

	"pdlb/config"
)

// strictInfo mirrors a 2026-02-28…07-08 decode's PrefillServerInfo: unknown
// keys are an error, as PrefillServerInfo(**data) makes them.
type strictInfo struct {
	AttnTPSize          int     `json:"attn_tp_size"`
	AttnCPSize          int     `json:"attn_cp_size"`
	DPSize              int     `json:"dp_size"`
	PPSize              int     `json:"pp_size"`
	PageSize            *int    `json:"page_size"`
	KVCacheDtype        *string `json:"kv_cache_dtype"`
	FollowBootstrapRoom bool    `json:"follow_bootstrap_room"`
}

func TestSentinelKeySets(t *testing.T) {
	base := []string{"attn_cp_size", "attn_tp_size", "dp_size", "follow_bootstrap_room", "kv_cache_dtype", "page_size", "pp_size"}
	ext := append(slices.Clone(base), "enable_dsa_cache_layer_split", "prefill_http_port",
		"required_dst_info_num", "required_prefill_response_num", "target_cp_ranks", "target_pp_ranks", "target_tp_rank", "target_tp_ranks")
	slices.Sort(ext)
	for _, c := range []struct {
		extended bool
		want     []string
	}{{false, base}, {true, ext}} {
		e := startRegistry(t, config.Bootstrap{ExtendedSentinel: c.extended})
		mustStatus(t, "PUT", e.do(t, "PUT", "/route", rankPUT(1, 0, 1, 0, "10.0.0.1", 17000, map[string]any{"enable_dsa_cache_layer_split": true})), 200)
		r := e.do(t, "GET", sentinelPath, "")
		mustStatus(t, "sentinel", r, 200)
		m := keysOf(t, r.body)
		var got []string
		for k := range m {
			got = append(got, k)
		}
		slices.Sort(got)
		if !slices.Equal(got, c.want) {
			t.Fatalf("extended=%v keys %v, want %v", c.extended, got, c.want)
		}
		dec := json.NewDecoder(stringsReader(r.body))
		dec.DisallowUnknownFields()
		var si strictInfo
		err := dec.Decode(&si)
		if c.extended != (err != nil) {
			t.Fatalf("extended=%v: strict old-decode parse err=%v", c.extended, err)
		}
		if c.extended {
			if string(m["prefill_http_port"]) != "30000" || string(m["enable_dsa_cache_layer_split"]) != "true" || string(m["target_tp_ranks"]) != "null" {
				t.Fatalf("extended values: %s", r.body)
			}
		}
		info, err := decodeSentinel([]byte(r.body))
		if err != nil || info.AttnTPSize != 1 || *info.KVCacheDtype != "auto" || !info.FollowBootstrapRoom {
			t.Fatalf("decodeSentinel: %+v %v", info, err)
		}
	}
}

func TestFollowBootstrapRoomFromLoadBalanceMethod(t *testing.T) {
	e := startRegistry(t, config.Bootstrap{})
	mustStatus(t, "PUT", e.do(t, "PUT", "/route", rankPUT(1, 0, 1, 0, "h", 1, map[string]any{"load_balance_method": "round_robin"})), 200)
	mustContain(t, "sentinel", e.do(t, "GET", sentinelPath, "").body, `"follow_bootstrap_room":false`)
}
