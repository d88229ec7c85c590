package bootstrap

import (
	"encoding/json"

	"github.com/valyala/fasthttp"
)

// queryForm is one era's GET /route query (§7). params name the dp, cp, tp
// and pp rank parameters in that order; "" means the era has no such
// dimension (rank 0).
type queryForm struct {
	name     string
	params   [4]string
	sentinel func(s *snapshot, forceFull bool) []byte
	notFound func(raw [4][]byte) string
}

// The eras pdlb answers, told apart by parameter names (§7 advice a):
//
//   - current (2026-02-28 on): prefill_dp_rank, prefill_cp_rank,
//     target_tp_rank, target_pp_rank → PrefillServerInfo in the era of the
//     namespace's first registrant: all 15 keys of today's dataclass when it
//     sent enable_dsa_cache_layer_split or prefill_http_port (SGLang from
//     2026-07-09, whose decodes need them), else the 7 base keys that every
//     decode of this form accepts (those from 02-28 to 07-08 reject keys
//     their dataclass lacks). ExtendedSentinel forces the 15.
//   - feb2026 (2026-02-23 … 02-27): engine_rank, prefill_dp_rank,
//     target_pp_rank → {attn_tp_size, dp_size, pp_size, page_size,
//     kv_cache_dtype, follow_bootstrap_room}: the 02-26 dataclass. The
//     02-23…02-25 decodes (3 days of main, no release) lacked
//     kv_cache_dtype and will reject it.
//   - v0.5 (2025-08-05 … 2026-02-22): engine_rank (attn-tp rank),
//     target_dp_group, target_pp_rank → {prefill_attn_tp_size,
//     prefill_dp_size, prefill_pp_size, prefill_page_size}; that era read
//     the keys by name, so the page-size key is harmless before 2026-01-05.
//   - v0.4 (≤2025-08-04): engine_rank (tp rank within its dp group),
//     target_dp_group → {prefill_tp_size (whole engine), prefill_dp_size}.
//
// Any form that names prefill_cp_rank or target_tp_rank is current, so a
// malformed current query gets the current 400, not a legacy guess.
var (
	formCurrent = &queryForm{
		name:   "current",
		params: [4]string{"prefill_dp_rank", "prefill_cp_rank", "target_tp_rank", "target_pp_rank"},
		sentinel: func(s *snapshot, forceFull bool) []byte {
			if forceFull {
				return s.sentinelFull
			}
			return s.sentinel
		},
		notFound: func(r [4][]byte) string {
			return "Bootstrap info not found for dp_rank=" + string(r[0]) + " cp_rank=" + string(r[1]) +
				" tp_rank=" + string(r[2]) + " pp_rank=" + string(r[3])
		},
	}
	formFeb = &queryForm{
		name:     "feb2026",
		params:   [4]string{"prefill_dp_rank", "", "engine_rank", "target_pp_rank"},
		sentinel: func(s *snapshot, _ bool) []byte { return s.legacyFeb },
		notFound: func(r [4][]byte) string {
			return "Bootstrap info not found for dp_rank=" + string(r[0]) + " engine_rank=" + string(r[2]) + " pp_rank=" + string(r[3])
		},
	}
	formV05 = &queryForm{
		name:     "v0.5",
		params:   [4]string{"target_dp_group", "", "engine_rank", "target_pp_rank"},
		sentinel: func(s *snapshot, _ bool) []byte { return s.legacyV05 },
		notFound: func(r [4][]byte) string {
			return "Bootstrap info not found for target_dp_group=" + string(r[0]) + " engine_rank=" + string(r[2]) + " target_pp_rank=" + string(r[3])
		},
	}
	formV04 = &queryForm{
		name:     "v0.4",
		params:   [4]string{"target_dp_group", "", "engine_rank", ""},
		sentinel: func(s *snapshot, _ bool) []byte { return s.legacyV04 },
		notFound: func(r [4][]byte) string {
			return "Bootstrap info not found for target_dp_group=" + string(r[0]) + " engine_rank=" + string(r[2])
		},
	}
)

func detectForm(q *fasthttp.Args) *queryForm {
	switch {
	case q.Has("prefill_cp_rank") || q.Has("target_tp_rank"):
		return formCurrent
	case q.Has("target_dp_group") && q.Has("target_pp_rank"):
		return formV05
	case q.Has("target_dp_group"):
		return formV04
	case q.Has("engine_rank"):
		return formFeb
	default:
		return formCurrent // and its "Missing inputs" 400
	}
}

func marshalOrEmpty(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		return []byte("{}")
	}
	return b
}

func encodeLegacyV04(p PrefillInfo) []byte {
	return marshalOrEmpty(struct {
		TPSize int `json:"prefill_tp_size"`
		DPSize int `json:"prefill_dp_size"`
	}{p.AttnTPSize * p.DPSize, p.DPSize})
}

func encodeLegacyV05(p PrefillInfo) []byte {
	return marshalOrEmpty(struct {
		AttnTPSize int  `json:"prefill_attn_tp_size"`
		DPSize     int  `json:"prefill_dp_size"`
		PPSize     int  `json:"prefill_pp_size"`
		PageSize   *int `json:"prefill_page_size"`
	}{p.AttnTPSize, p.DPSize, p.PPSize, p.PageSize})
}

func encodeLegacyFeb(p PrefillInfo) []byte {
	return marshalOrEmpty(struct {
		AttnTPSize          int     `json:"attn_tp_size"`
		DPSize              int     `json:"dp_size"`
		PPSize              int     `json:"pp_size"`
		PageSize            *int    `json:"page_size"`
		KVCacheDtype        *string `json:"kv_cache_dtype"`
		FollowBootstrapRoom bool    `json:"follow_bootstrap_room"`
	}{p.AttnTPSize, p.DPSize, p.PPSize, p.PageSize, p.KVCacheDtype, p.FollowBootstrapRoom})
}
