package bootstrap

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode"
)

// Limits that keep a hostile or broken registrant from making the expected
// rank count overflow or absurd; real deployments are far below them.
const (
	maxSize  = 1 << 16
	maxRanks = 1 << 20
)

// rankKey addresses one prefill rank: SGLang's
// prefill_port_table[dp_group][attn_cp_rank][attn_tp_rank][pp_rank].
type rankKey struct{ dp, cp, tp, pp int }

// topology is what the first registrant of a namespace fixes.
type topology struct {
	tp, cp, pp, dp int
	pageSize       *int
	kvDtype        *string
	follow         bool
	dsa            bool
	httpPort       *int
	// fullInfo: the registrant sent enable_dsa_cache_layer_split or
	// prefill_http_port, so it is SGLang from 2026-07-09 on and its decodes
	// parse (and need) the full PrefillServerInfo; see encodeSentinel.
	fullInfo bool
}

func (t *topology) ranks() int { return t.dp * t.cp * t.tp * t.pp }

// bounded reports whether the rank count stays within maxRanks, checked
// factor by factor: four sizes up to maxSize can overflow the product to 0.
func (t *topology) bounded() bool {
	n := 1
	for _, s := range []int{t.dp, t.cp, t.tp, t.pp} {
		if s < 1 || n > maxRanks/s {
			return false
		}
		n *= s
	}
	return true
}

// registration is one parsed PUT /route.
type registration struct {
	topo topology
	key  rankKey
	rank RankInfo
}

// parseRegistration validates a PUT /route body of any supported era and
// returns nil (and no error) when the body names a role other than
// "Prefill", which legacy SGLang accepted and ignored.
//
// Eras (protocol doc §7):
//   - ≤v0.4.10: tp_size (whole engine), dp_size, engine_rank (global tp
//     rank). Stored as attn_tp = tp_size/dp_size, dp_group =
//     engine_rank / attn_tp, tp rank = engine_rank % attn_tp, which is how
//     that era's server keyed its table.
//   - v0.5.x to today: attn_tp/attn_dp/pp/system_dp sizes and ranks;
//     attn_cp_size/rank default to 1/0 (before 2026-02-28); page_size and
//     kv_cache_dtype default to null; role optional;
//     enable_dsa_cache_layer_split and prefill_http_port (2026-07-09 on)
//     default to false and null, and whether they were sent at all decides
//     the sentinel's key set (topology.fullInfo).
//
// Integers may be JSON integers or strings Python's int() accepts
// ("17000", " 8_998 "); floats are refused rather than truncated.
func parseRegistration(body []byte) (*registration, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil || m == nil {
		return nil, badField("body", "must be a JSON object")
	}
	if raw, ok := m["role"]; ok {
		role, err := stringField("role", raw)
		if err != nil {
			return nil, err
		}
		if role != "Prefill" {
			return nil, nil
		}
	}
	f := fields(m)
	var r registration
	if f.has("tp_size") && !f.has("attn_tp_size") {
		f.legacyV04(&r)
	} else {
		f.current(&r)
	}
	r.rank.RankIP = f.str("rank_ip")
	if f.err == nil && r.rank.RankIP == "" {
		f.err = badField("rank_ip", "must not be empty")
	}
	r.rank.RankPort = f.intIn("rank_port", true, 0, 1, 65535)
	if f.err == nil && !r.topo.bounded() {
		f.err = badField("topology", "dp×cp×tp×pp = %d×%d×%d×%d exceeds %d ranks", r.topo.dp, r.topo.cp, r.topo.tp, r.topo.pp, maxRanks)
	}
	if f.err != nil {
		return nil, f.err
	}
	return &r, nil
}

// fields reads typed values out of a decoded object, keeping the first error
// so each parse reads as a straight list of fields.
type fieldReader struct {
	m   map[string]json.RawMessage
	err error
}

func fields(m map[string]json.RawMessage) *fieldReader { return &fieldReader{m: m} }

func (f *fieldReader) has(k string) bool { _, ok := f.m[k]; return ok }

func (f *fieldReader) current(r *registration) {
	t := &r.topo
	t.tp = f.intIn("attn_tp_size", true, 0, 1, maxSize)
	r.key.tp = f.intIn("attn_tp_rank", true, 0, 0, t.tp-1)
	t.cp = f.intIn("attn_cp_size", false, 1, 1, maxSize)
	r.key.cp = f.intIn("attn_cp_rank", false, 0, 0, t.cp-1)
	t.pp = f.intIn("pp_size", true, 0, 1, maxSize)
	r.key.pp = f.intIn("pp_rank", true, 0, 0, t.pp-1)
	// §3.1: the system DP size wins unless it is 1 (attention-DP only).
	sysDP := f.intIn("system_dp_size", true, 0, 1, maxSize)
	if f.err == nil && sysDP == 1 {
		t.dp = f.intIn("attn_dp_size", true, 0, 1, maxSize)
		r.key.dp = f.intIn("attn_dp_rank", true, 0, 0, t.dp-1)
	} else {
		t.dp = sysDP
		r.key.dp = f.intIn("system_dp_rank", true, 0, 0, t.dp-1)
	}
	f.common(t)
}

func (f *fieldReader) legacyV04(r *registration) {
	t := &r.topo
	tpSize := f.intIn("tp_size", true, 0, 1, maxSize)
	t.dp = f.intIn("dp_size", true, 0, 1, maxSize)
	if f.err == nil && tpSize%t.dp != 0 {
		f.err = badField("tp_size", "%d is not a multiple of dp_size %d", tpSize, t.dp)
	}
	engineRank := f.intIn("engine_rank", true, 0, 0, tpSize-1)
	if f.err != nil {
		return
	}
	t.tp, t.cp, t.pp = tpSize/t.dp, 1, 1
	r.key = rankKey{dp: engineRank / t.tp, tp: engineRank % t.tp}
	f.common(t)
}

func (f *fieldReader) common(t *topology) {
	t.pageSize = f.optInt("page_size", 1, maxSize*1024)
	t.kvDtype = f.optStr("kv_cache_dtype")
	lb := f.optStr("load_balance_method")
	t.follow = lb == nil || *lb == "" || *lb == "follow_bootstrap_room"
	t.dsa = f.optBool("enable_dsa_cache_layer_split")
	t.httpPort = f.optInt("prefill_http_port", 1, 65535)
	// Presence, not value: SGLang's client sends both keys on every PUT
	// since they exist (the flag is usually false), older clients neither.
	t.fullInfo = f.has("enable_dsa_cache_layer_split") || f.has("prefill_http_port")
}

// intIn reads an integer in [lo, hi]; absent optional keys yield def.
func (f *fieldReader) intIn(k string, required bool, def, lo, hi int) int {
	if f.err != nil {
		return def
	}
	raw, ok := f.m[k]
	if !ok {
		if required {
			f.err = badField(k, "is required")
		}
		return def
	}
	v, problem := rawInt(raw)
	if problem == "" && (v < int64(lo) || v > int64(hi)) {
		problem = "must be in [" + strconv.Itoa(lo) + ", " + strconv.Itoa(hi) + "], got " + strconv.FormatInt(v, 10)
	}
	if problem != "" {
		f.err = badField(k, "%s", problem)
		return def
	}
	return int(v)
}

func (f *fieldReader) optInt(k string, lo, hi int) *int {
	if f.err != nil || isNull(f.m[k]) {
		return nil
	}
	v := f.intIn(k, false, 0, lo, hi)
	if f.err != nil {
		return nil
	}
	return &v
}

func (f *fieldReader) str(k string) string {
	if f.err != nil {
		return ""
	}
	raw, ok := f.m[k]
	if !ok {
		f.err = badField(k, "is required")
		return ""
	}
	s, err := stringField(k, raw)
	if err != nil {
		f.err = err
	}
	return s
}

func (f *fieldReader) optStr(k string) *string {
	if f.err != nil || isNull(f.m[k]) {
		return nil
	}
	s := f.str(k)
	if f.err != nil {
		return nil
	}
	return &s
}

func (f *fieldReader) optBool(k string) bool {
	raw := f.m[k]
	if f.err != nil || isNull(raw) {
		return false
	}
	var b bool
	if err := json.Unmarshal(raw, &b); err != nil {
		f.err = badField(k, "must be a boolean, got %s", kindOf(raw))
	}
	return b
}

// isNull is true for an absent key or a JSON null: both mean "not given".
func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

func stringField(k string, raw json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil || isNull(raw) {
		return "", badField(k, "must be a string, got %s", kindOf(raw))
	}
	return s, nil
}

// rawInt reads a JSON integer or an int()-able string; problem is "" on
// success, else a description for the 400 text.
func rawInt(raw json.RawMessage) (int64, string) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, "must be an integer, got an invalid string"
		}
		v, ok := pyInt(s)
		if !ok {
			return 0, "must be an integer, got " + strconv.Quote(clip(s, 40))
		}
		return v, ""
	}
	if len(raw) > 0 && (raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9') {
		v, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil {
			return 0, "must be an integer, got " + clip(string(raw), 40)
		}
		return v, ""
	}
	return 0, "must be an integer, got " + kindOf(raw)
}

// kindOf names a JSON value's type for error texts.
func kindOf(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case 'n':
		return "null"
	case 't', 'f':
		return "a boolean"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	default:
		return "a number"
	}
}

// pyInt parses s the way Python's int(s) does for base 10: surrounding
// whitespace, one sign, digits with single underscores between them.
// SGLang int()-coerces rank_port and the query parameters, so engines and
// scripts do send "17000".
func pyInt(s string) (int64, bool) {
	s = strings.TrimFunc(s, unicode.IsSpace)
	sign := ""
	if s != "" && (s[0] == '+' || s[0] == '-') {
		sign, s = s[:1], s[1:]
	}
	if s == "" || s[0] == '_' || s[len(s)-1] == '_' || strings.Contains(s, "__") {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c != '_' && (c < '0' || c > '9') {
			return 0, false
		}
	}
	v, err := strconv.ParseInt(sign+strings.ReplaceAll(s, "_", ""), 10, 64)
	return v, err == nil
}
