package bootstrap

import (
	"encoding/json"
	"errors"
	"io"
	"slices"
	"testing"

	"pdlb/config"
)

// baseKeys and fullKeys are the sentinel answer's keys in SGLang's order.
// fullKeys is today's PrefillServerInfo (15 fields; sgl-project/sglang
// python/sglang/srt/disaggregation/common/conn.py), which SGLang's own
// server sends whole through dataclasses.asdict.
var (
	baseKeys = []string{"attn_tp_size", "attn_cp_size", "dp_size", "pp_size", "page_size", "kv_cache_dtype", "follow_bootstrap_room"}
	fullKeys = append(slices.Clone(baseKeys), "enable_dsa_cache_layer_split", "prefill_http_port",
		"target_tp_rank", "target_tp_ranks", "target_cp_ranks", "target_pp_ranks",
		"required_dst_info_num", "required_prefill_response_num")
)

// olderEra drops the 2026-07-09 keys from rankPUT's payload: what a prefill
// built between 2026-02-28 and 07-08 sends.
var olderEra = map[string]any{"enable_dsa_cache_layer_split": nil, "prefill_http_port": nil}

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

// strictCurrentInfo mirrors today's decode: the 15 fields, unknown keys an error.
type strictCurrentInfo struct {
	strictInfo
	EnableDSACacheLayerSplit   bool   `json:"enable_dsa_cache_layer_split"`
	PrefillHTTPPort            *int   `json:"prefill_http_port"`
	TargetTPRank               *int   `json:"target_tp_rank"`
	TargetTPRanks              *[]int `json:"target_tp_ranks"`
	TargetCPRanks              *[]int `json:"target_cp_ranks"`
	TargetPPRanks              *[]int `json:"target_pp_ranks"`
	RequiredDstInfoNum         *int   `json:"required_dst_info_num"`
	RequiredPrefillResponseNum *int   `json:"required_prefill_response_num"`
}

// orderedKeys returns a JSON object's top-level keys in document order.
func orderedKeys(t *testing.T, body string) []string {
	t.Helper()
	dec := json.NewDecoder(stringsReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not a JSON object: %q", body)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("%q: %v", body, err)
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatalf("%q: %v", body, err)
		}
	}
	return keys
}

// strictDecode parses body as a decode that rejects unknown keys does.
func strictDecode(body string, v any) error {
	dec := json.NewDecoder(stringsReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data")
	}
	return nil
}

// sglangTargetCPRanks is the CP part of SGLang's decode-side rank mapping
// (CommonKVManager._resolve_rank_mapping) for a decode with attn_cp_size 1
// that does not force all CP ranks itself: all prefill CP ranks when the
// prefill splits its DSA cache by layer, else CP rank 0 only.
func sglangTargetCPRanks(info strictCurrentInfo) []int {
	if info.AttnCPSize == 1 {
		return []int{0}
	}
	ranks := make([]int, info.AttnCPSize)
	for i := range ranks {
		ranks[i] = i
	}
	if !info.EnableDSACacheLayerSplit {
		return ranks[:1]
	}
	return ranks
}

// sentinelBody registers the given PUT bodies and returns the sentinel body.
func sentinelBody(t *testing.T, e *regEnv, puts ...string) string {
	t.Helper()
	for _, p := range puts {
		mustStatus(t, "PUT", e.do(t, "PUT", "/route", p), 200)
	}
	r := e.do(t, "GET", sentinelPath, "")
	mustStatus(t, "sentinel", r, 200)
	return r.body
}

// A prefill that sends the 2026-07-09 keys gets them back, with the rest of
// today's PrefillServerInfo, under the default config: its decodes read
// prefill_http_port (re-bootstrap after retraction) and
// enable_dsa_cache_layer_split (pull every CP rank's share of the KV).
func TestSentinelCurrentRegistrantGetsAllKeys(t *testing.T) {
	e := startRegistry(t, config.Bootstrap{})
	over := func(cpRank int) map[string]any {
		return map[string]any{"attn_cp_size": 2, "attn_cp_rank": cpRank, "enable_dsa_cache_layer_split": true, "prefill_http_port": 30000}
	}
	body := sentinelBody(t, e, rankPUT(1, 0, 1, 0, "10.0.0.1", 17000, over(0)), rankPUT(1, 0, 1, 0, "10.0.0.2", 17001, over(1)))
	if got := orderedKeys(t, body); !slices.Equal(got, fullKeys) {
		t.Fatalf("keys %v, want SGLang's %v", got, fullKeys)
	}
	var info strictCurrentInfo
	if err := strictDecode(body, &info); err != nil {
		t.Fatalf("today's decode cannot parse %s: %v", body, err)
	}
	if info.PrefillHTTPPort == nil || *info.PrefillHTTPPort != 30000 || !info.EnableDSACacheLayerSplit || info.AttnCPSize != 2 {
		t.Fatalf("values lost: %s", body)
	}
	if info.TargetTPRank != nil || info.TargetTPRanks != nil || info.TargetCPRanks != nil || info.TargetPPRanks != nil ||
		info.RequiredDstInfoNum != nil || info.RequiredPrefillResponseNum != nil {
		t.Fatalf("target_*/required_* must be null, the decode fills them: %s", body)
	}
	if got := sglangTargetCPRanks(info); !slices.Equal(got, []int{0, 1}) {
		t.Fatalf("a decode would pull CP ranks %v, want [0 1]", got)
	}
}

// A prefill from before 2026-07-09 gets exactly the seven keys its own
// decodes accept: they reject any key their PrefillServerInfo lacks.
func TestSentinelOlderRegistrantGetsBaseKeys(t *testing.T) {
	e := startRegistry(t, config.Bootstrap{})
	body := sentinelBody(t, e, rankPUT(1, 0, 1, 0, "10.0.0.1", 17000, olderEra))
	if got := orderedKeys(t, body); !slices.Equal(got, baseKeys) {
		t.Fatalf("keys %v, want %v", got, baseKeys)
	}
	var si strictInfo
	if err := strictDecode(body, &si); err != nil {
		t.Fatalf("a 2026-02-28…07-08 decode rejects %s: %v", body, err)
	}
	if si.AttnTPSize != 1 || si.PageSize == nil || *si.PageSize != 64 || !si.FollowBootstrapRoom {
		t.Fatalf("values: %s", body)
	}
}

// The first registrant fixes the era as it fixes the topology; DELETE
// /route forgets both, and the next first registrant decides again.
func TestSentinelEraFollowsFirstRegistrantAcrossReset(t *testing.T) {
	e := startRegistry(t, config.Bootstrap{})
	older0 := rankPUT(2, 0, 1, 0, "10.0.0.1", 17000, olderEra)
	older1 := rankPUT(2, 1, 1, 0, "10.0.0.1", 17001, olderEra)
	newer0 := rankPUT(2, 0, 1, 0, "10.0.0.1", 17000, nil)
	newer1 := rankPUT(2, 1, 1, 0, "10.0.0.1", 17001, nil)
	for i, c := range []struct {
		what string
		puts []string
		want []string
	}{
		{"older first, newer second", []string{older0, newer1}, baseKeys},
		{"newer after reset", []string{newer0, newer1}, fullKeys},
		{"newer first, older second", []string{newer0, older1}, fullKeys},
		{"older after reset", []string{older0, older1}, baseKeys},
	} {
		if i > 0 {
			mustStatus(t, "DELETE", e.do(t, "DELETE", "/route", ""), 200)
		}
		if got := orderedKeys(t, sentinelBody(t, e, c.puts...)); !slices.Equal(got, c.want) {
			t.Fatalf("%s: keys %v, want %v", c.what, got, c.want)
		}
	}
}

// bootstrap.extended_sentinel forces today's full key set, whatever era
// the registrants speak.
func TestExtendedSentinelForcesAllKeys(t *testing.T) {
	for _, c := range []struct {
		extended bool
		over     map[string]any
		want     []string
	}{
		{false, olderEra, baseKeys},
		{true, olderEra, fullKeys},
		{true, map[string]any{"enable_dsa_cache_layer_split": true}, fullKeys},
	} {
		e := startRegistry(t, config.Bootstrap{ExtendedSentinel: c.extended})
		body := sentinelBody(t, e, rankPUT(1, 0, 1, 0, "10.0.0.1", 17000, c.over))
		if got := orderedKeys(t, body); !slices.Equal(got, c.want) {
			t.Fatalf("extended=%v over=%v: keys %v, want %v", c.extended, c.over, got, c.want)
		}
		err := strictDecode(body, &strictInfo{})
		if full := len(c.want) == len(fullKeys); full != (err != nil) {
			t.Fatalf("extended=%v: strict old-decode parse err=%v", c.extended, err)
		}
		m := keysOf(t, body)
		if c.over["enable_dsa_cache_layer_split"] == true &&
			(string(m["prefill_http_port"]) != "30000" || string(m["enable_dsa_cache_layer_split"]) != "true" || string(m["target_tp_ranks"]) != "null") {
			t.Fatalf("extended values: %s", body)
		}
		info, err := decodeSentinel([]byte(body))
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
