package bootstrap

import (
	"encoding/json"
	"fmt"
)

// sentinelBase is the seven keys every decode since 2026-02-28 accepts. Key
// order follows SGLang's dataclass so diffs against a real engine read easily.
type sentinelBase struct {
	AttnTPSize          int     `json:"attn_tp_size"`
	AttnCPSize          int     `json:"attn_cp_size"`
	DPSize              int     `json:"dp_size"`
	PPSize              int     `json:"pp_size"`
	PageSize            *int    `json:"page_size"`
	KVCacheDtype        *string `json:"kv_cache_dtype"`
	FollowBootstrapRoom bool    `json:"follow_bootstrap_room"`
}

// sentinelFull is today's PrefillServerInfo, all 15 fields in its order
// (sgl-project/sglang python/sglang/srt/disaggregation/common/conn.py,
// read at 0094505da; the same at eec794bce, 2026-08-23): the seven base
// keys, enable_dsa_cache_layer_split and prefill_http_port (2026-07-09),
// and six target_*/required_* keys (2026-03-18) that the server always
// sends as null because the decode fills them in. SGLang's server sends
// all 15 (dataclasses.asdict); a decode needs prefill_http_port to
// re-bootstrap a retracted request and enable_dsa_cache_layer_split to
// pull every CP rank's KV. Decodes since 2026-02-23 (d160c5b9b) build
// PrefillServerInfo(**data), so a key their dataclass lacks is a
// TypeError: one from 2026-02-28 to 07-08 rejects this body, which is why
// it goes only to namespaces whose first registrant sent a 2026-07-09 key,
// or with ExtendedSentinel.
type sentinelFull struct {
	sentinelBase
	EnableDSACacheLayerSplit   bool   `json:"enable_dsa_cache_layer_split"`
	PrefillHTTPPort            *int   `json:"prefill_http_port"`
	TargetTPRank               *int   `json:"target_tp_rank"`
	TargetTPRanks              *[]int `json:"target_tp_ranks"`
	TargetCPRanks              *[]int `json:"target_cp_ranks"`
	TargetPPRanks              *[]int `json:"target_pp_ranks"`
	RequiredDstInfoNum         *int   `json:"required_dst_info_num"`
	RequiredPrefillResponseNum *int   `json:"required_prefill_response_num"`
}

func baseOf(p PrefillInfo) sentinelBase {
	return sentinelBase{
		AttnTPSize: p.AttnTPSize, AttnCPSize: p.AttnCPSize, DPSize: p.DPSize, PPSize: p.PPSize,
		PageSize: p.PageSize, KVCacheDtype: p.KVCacheDtype, FollowBootstrapRoom: p.FollowBootstrapRoom,
	}
}

// encodeSentinel renders GET /route's current-form sentinel answer: the 15
// keys of sentinelFull when full, else the 7 of sentinelBase.
func encodeSentinel(p PrefillInfo, full bool) []byte {
	var v any = baseOf(p)
	if full {
		v = sentinelFull{sentinelBase: baseOf(p), EnableDSACacheLayerSplit: p.EnableDSACacheLayerSplit, PrefillHTTPPort: p.PrefillHTTPPort}
	}
	b, err := json.Marshal(v)
	if err != nil { // cannot happen for these types; keep handlers panic-free anyway
		return []byte("{}")
	}
	return b
}

// wireInfo decodes any era's current-style sentinel answer: 7 keys (SGLang
// 2026-02-28…03-17; pdlb for older prefills), 13 (SGLang 03-18…07-08),
// 9 (SGLang's rust port) or 15 (SGLang since 07-09).
type wireInfo struct {
	AttnTPSize               *int    `json:"attn_tp_size"`
	AttnCPSize               *int    `json:"attn_cp_size"`
	DPSize                   *int    `json:"dp_size"`
	PPSize                   *int    `json:"pp_size"`
	PageSize                 *int    `json:"page_size"`
	KVCacheDtype             *string `json:"kv_cache_dtype"`
	FollowBootstrapRoom      *bool   `json:"follow_bootstrap_room"`
	EnableDSACacheLayerSplit *bool   `json:"enable_dsa_cache_layer_split"`
	PrefillHTTPPort          *int    `json:"prefill_http_port"`
}

// decodeSentinel parses a sentinel body. attn_tp_size, dp_size and pp_size
// are required; attn_cp_size defaults to 1 (pre-2026-02-28 registries) and a
// null follow_bootstrap_room means true, as in SGLang.
func decodeSentinel(body []byte) (PrefillInfo, error) {
	var w wireInfo
	if err := json.Unmarshal(body, &w); err != nil {
		return PrefillInfo{}, fmt.Errorf("prefill info is not a JSON object: %w", err)
	}
	p := PrefillInfo{AttnCPSize: 1, FollowBootstrapRoom: true, PageSize: w.PageSize, KVCacheDtype: w.KVCacheDtype, PrefillHTTPPort: w.PrefillHTTPPort}
	for _, f := range []struct {
		name string
		src  *int
		dst  *int
		req  bool
	}{
		{"attn_tp_size", w.AttnTPSize, &p.AttnTPSize, true},
		{"attn_cp_size", w.AttnCPSize, &p.AttnCPSize, false},
		{"dp_size", w.DPSize, &p.DPSize, true},
		{"pp_size", w.PPSize, &p.PPSize, true},
	} {
		if f.src == nil {
			if f.req {
				return PrefillInfo{}, fmt.Errorf("prefill info lacks %s", f.name)
			}
			continue
		}
		if *f.src < 1 {
			return PrefillInfo{}, fmt.Errorf("prefill info has %s=%d, want >= 1", f.name, *f.src)
		}
		*f.dst = *f.src
	}
	if w.FollowBootstrapRoom != nil {
		p.FollowBootstrapRoom = *w.FollowBootstrapRoom
	}
	if w.EnableDSACacheLayerSplit != nil {
		p.EnableDSACacheLayerSplit = *w.EnableDSACacheLayerSplit
	}
	return p, nil
}
