package router

import (
	"errors"
	"fmt"

	"github.com/tidwall/gjson"
)

// pdRequest is what pdlb needs to know about a client body: just enough to
// route and inject, read by scanning the top-level members once. The body
// itself is never decoded into Go values, so every byte the client sent
// (64-bit integers included) reaches the engines unchanged.
type pdRequest struct {
	stream        bool
	returnLogprob bool
	// batch is the number of items of a batch request (text list or
	// input_ids list of lists); 0 for a single request.
	batch int
	// members counts top-level members; drops lists the spans to remove.
	members int
	drops   [maxDrops]span
	ndrops  int
	// closeIdx is the position of the body's final '}'.
	closeIdx int
	// prefillRank is a client-named prefill DP rank (disagg_prefill_dp_rank,
	// else routed_dp_rank); rankField names where it came from.
	prefillRank int64
	rankField   string
	// rankSpans are the spans of the two rank members (dropped when pdlb
	// rewrites them per leg).
	rankSpans  [2]span
	nrankSpans int
}

type span struct{ start, end int }

// maxDrops bounds the members pdlb replaces; a body repeating them more
// often than that is refused.
const maxDrops = 8

var errNotObject = errors.New("request body must be a JSON object")

// parseRequest checks that body is a JSON object and scans its top level.
func parseRequest(body []byte) (pdRequest, error) {
	var r pdRequest
	s := b2s(body)
	if !gjson.Valid(s) {
		return r, errors.New("request body is not valid JSON")
	}
	start := 0
	for start < len(s) && isSpace(s[start]) {
		start++
	}
	if start == len(s) || s[start] != '{' {
		return r, errNotObject
	}
	end := len(s) - 1
	for isSpace(s[end]) {
		end--
	}
	r.closeIdx = end
	obj := gjson.Parse(s[start:])
	var ferr error
	obj.ForEach(func(key, value gjson.Result) bool {
		r.members++
		ks, ve := key.Index+start, value.Index+start+len(value.Raw)
		switch key.Str {
		case "bootstrap_host", "bootstrap_port", "bootstrap_room":
			if r.ndrops == maxDrops {
				ferr = fmt.Errorf("%s: repeated too often", key.Str)
				return false
			}
			r.drops[r.ndrops] = span{ks, ve}
			r.ndrops++
		case "stream":
			r.stream = value.Bool()
		case "return_logprob":
			r.returnLogprob = value.Bool()
		case "text":
			if value.IsArray() {
				r.batch = countItems(value)
				if r.batch == 0 {
					ferr = errors.New("text: an empty list is not a request")
					return false
				}
			}
		case "input_ids":
			if value.IsArray() {
				first := value.Get("0")
				if !first.Exists() {
					ferr = errors.New("input_ids: an empty list is not a request")
					return false
				}
				if first.IsArray() {
					r.batch = countItems(value)
				}
			}
		case "disagg_prefill_dp_rank", "routed_dp_rank":
			if r.nrankSpans == len(r.rankSpans) {
				ferr = fmt.Errorf("%s: repeated", key.Str)
				return false
			}
			r.rankSpans[r.nrankSpans] = span{ks, ve}
			r.nrankSpans++
			if value.Type == gjson.Null {
				return true
			}
			if value.Type != gjson.Number || !isInteger(value.Raw) {
				ferr = fmt.Errorf("%s: must be an integer, got %s", key.Str, truncate(value.Raw, 40))
				return false
			}
			// disagg_prefill_dp_rank wins over routed_dp_rank.
			if r.rankField == "" || key.Str == "disagg_prefill_dp_rank" {
				r.prefillRank, r.rankField = value.Int(), key.Str
			}
		}
		return true
	})
	return r, ferr
}

func countItems(v gjson.Result) int {
	n := 0
	v.ForEach(func(_, _ gjson.Result) bool { n++; return true })
	return n
}

func isInteger(raw string) bool {
	if raw == "" {
		return false
	}
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if (c < '0' || c > '9') && !(i == 0 && c == '-') {
			return false
		}
	}
	return true
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
