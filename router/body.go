package router

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
)

// pdRequest is what pdlb needs to know about a client body: just enough to
// route and inject, read by scanning the top-level members once. The body
// itself is never decoded into Go values, so every byte the client sent
// (64-bit integers included) reaches the engines unchanged.
//
// The engines read the same bytes with Python's json module, where the last
// of duplicate members wins, and then pydantic in lax mode ("yes" and 1 are
// true). parseRequest reads every member it decides on the same way, or
// refuses the body with a 400 naming the member: a body never means one
// request to pdlb and another to the engines.
type pdRequest struct {
	// stream is the engine's reading of "stream"; returnLogprob that of
	// "return_logprob" (true when any item of a list is).
	stream        bool
	returnLogprob bool
	// batch is the number of items of a /generate batch (text list or
	// input_ids list of lists); 0 for a single request and on the OpenAI
	// routes, which take scalar bootstrap fields.
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
	// rankSpans are the spans of the rank members (all dropped when pdlb
	// rewrites them per leg).
	rankSpans  [maxDrops]span
	nrankSpans int
	// rid is the value span of the client's "rid" (the last one) when it is
	// not null: the engines use it, and pdlb aborts by it. ridSpans are the
	// spans of every rid member, cut out when pdlb writes a rid of its own.
	rid       span
	ridSpans  [maxDrops]span
	nridSpans int
	// prompt is the span of the prompt's JSON value, for the selection
	// policies (policy.Request.Prompt): the last text, else input_ids, of
	// /generate; the last messages, else prompt, of the OpenAI routes.
	prompt span
}

type span struct{ start, end int }

// maxDrops bounds how often a body may repeat the members pdlb replaces
// (the bootstrap members, and the rank members); more is refused.
const maxDrops = 8

// parseOptions says how a route reads its bodies.
type parseOptions struct {
	// generate marks /generate: its GenerateReqInput reads text, input_ids
	// and return_logprob, which the OpenAI request models ignore.
	generate bool
	// maxBatch is limits.max_batch_size: a larger /generate batch is refused.
	maxBatch int
}

var (
	errNotJSON   = errors.New("request body is not valid JSON")
	errNotObject = errors.New("request body must be a JSON object")
)

const (
	keyRoutedRank  = "routed_dp_rank"
	keyPrefillRank = "disagg_prefill_dp_rank"
)

// lastMembers holds the raw value of the last member of each name pdlb
// decides on ("" when absent): the one the engine reads.
type lastMembers struct {
	stream, returnLogprob, text, inputIDs, routedRank, prefillRank, rid string
	// Value spans of the prompt members (policy.Request.Prompt) and of rid.
	textSpan, inputIDsSpan, messagesSpan, promptSpan, ridSpan span
}

// parseRequest checks that body is a JSON object and reads its top level as
// the engine will.
func parseRequest(body []byte, opt parseOptions) (pdRequest, error) {
	var r pdRequest
	s := b2s(body)
	if !gjson.Valid(s) {
		return r, errNotJSON
	}
	i := skipSpace(s, 0)
	if i == len(s) || s[i] != '{' {
		return r, errNotObject
	}
	end := len(s) - 1
	for isSpace(s[end]) {
		end--
	}
	r.closeIdx = end
	var last lastMembers
	// The body is valid JSON, so the scan only has to find where each
	// member starts and ends.
	for i = skipSpace(s, i+1); i < end && s[i] == '"'; {
		keyEnd := skipString(s, i)
		valStart := skipSpace(s, skipSpace(s, keyEnd)+1) // past the ':'
		if valStart >= end {
			return r, errNotJSON
		}
		valEnd := skipValue(s, valStart)
		r.members++
		if err := r.member(s[i:keyEnd], s[valStart:valEnd], span{i, valEnd}, span{valStart, valEnd}, &last); err != nil {
			return r, err
		}
		if i = skipSpace(s, valEnd); i < end && s[i] == ',' {
			i = skipSpace(s, i+1)
		}
	}
	return r, r.decide(&last, opt)
}

// member notes one top-level member: the bootstrap and rank members are cut
// out by the injection; the last value of each member pdlb decides on is kept.
func (r *pdRequest) member(rawKey, value string, sp, vs span, last *lastMembers) error {
	var buf [24]byte
	name, ok := unquoteShort(rawKey, buf[:])
	if !ok {
		return nil // longer than every name below
	}
	switch name {
	case "bootstrap_host", "bootstrap_port", "bootstrap_room":
		if r.ndrops == maxDrops {
			return fmt.Errorf("%s: repeated too often", name)
		}
		r.drops[r.ndrops] = sp
		r.ndrops++
	case keyRoutedRank, keyPrefillRank:
		if r.nrankSpans == maxDrops {
			return fmt.Errorf("%s: repeated too often", name)
		}
		r.rankSpans[r.nrankSpans] = sp
		r.nrankSpans++
		if name == keyRoutedRank {
			last.routedRank = value
		} else {
			last.prefillRank = value
		}
	case "rid":
		if r.nridSpans == maxDrops {
			return errors.New("rid: repeated too often")
		}
		r.ridSpans[r.nridSpans] = sp
		r.nridSpans++
		last.rid, last.ridSpan = value, vs
	case "stream":
		last.stream = value
	case "return_logprob":
		last.returnLogprob = value
	case "text":
		last.text, last.textSpan = value, vs
	case "input_ids":
		last.inputIDs, last.inputIDsSpan = value, vs
	case "messages":
		last.messagesSpan = vs
	case "prompt":
		last.promptSpan = vs
	}
	return nil
}

// decide reads the members pdlb decides on as pydantic validates them.
func (r *pdRequest) decide(last *lastMembers, opt parseOptions) error {
	// stream: bool (not Optional) on /generate and the OpenAI routes alike.
	if v := last.stream; v != "" {
		b, ok := laxBool(v)
		if !ok {
			return mustBe("stream", "a boolean", v)
		}
		r.stream = b
	}
	if opt.generate {
		if err := r.decideGenerate(last, opt.maxBatch); err != nil {
			return err
		}
		r.prompt = last.inputIDsSpan
		if last.text != "" && last.text != "null" {
			r.prompt = last.textSpan
		}
	} else {
		r.prompt = last.promptSpan
		if last.messagesSpan.end > 0 {
			r.prompt = last.messagesSpan
		}
	}
	if err := r.decideRID(last.rid, last.ridSpan); err != nil {
		return err
	}
	// routed_dp_rank, disagg_prefill_dp_rank: Optional[int]. pydantic also
	// takes "1", " 1 ", "1_0", 1.0 and true, by rules that vary between its
	// versions; pdlb takes JSON integers only, so it never honours a rank
	// the engine reads differently.
	routed, okRouted, err := readRank(keyRoutedRank, last.routedRank)
	if err != nil {
		return err
	}
	prefill, okPrefill, err := readRank(keyPrefillRank, last.prefillRank)
	if err != nil {
		return err
	}
	switch {
	case okPrefill:
		r.prefillRank, r.rankField = prefill, keyPrefillRank
	case okRouted:
		r.prefillRank, r.rankField = routed, keyRoutedRank
	}
	return nil
}

// decideGenerate reads what only GenerateReqInput has. Batch or not is
// decided as GenerateReqInput._determine_batch_size does: by text when it
// is not null, else by input_ids (a list of lists is a batch).
func (r *pdRequest) decideGenerate(last *lastMembers, maxBatch int) error {
	// return_logprob: Optional[Union[List[bool], bool]].
	if v := last.returnLogprob; v != "" && v != "null" {
		if v[0] == '[' {
			for i := 1; ; {
				start, end, ok := nextItem(v, i)
				if !ok {
					break
				}
				b, ok := laxBool(v[start:end])
				if !ok {
					return mustBe("return_logprob", "a boolean or a list of booleans", v)
				}
				r.returnLogprob = r.returnLogprob || b
				i = end
			}
		} else if b, ok := laxBool(v); ok {
			r.returnLogprob = b
		} else {
			return mustBe("return_logprob", "a boolean or a list of booleans", v)
		}
	}
	key, v := "text", last.text
	switch {
	case v != "" && v != "null":
		// text: Optional[Union[List[str], str]].
		switch v[0] {
		case '"':
			return nil
		case '[':
			n, bad, badItem := countItems(v, '"')
			if bad >= 0 {
				return fmt.Errorf("text: item %d must be a string, got %s", bad, truncate(badItem, 40))
			}
			if n == 0 {
				return errors.New("text: an empty list is not a request")
			}
			r.batch = n
		default:
			return mustBe("text", "a string or a list of strings", v)
		}
	case last.inputIDs != "" && last.inputIDs != "null":
		// input_ids: Optional[Union[List[List[int]], List[int]]]. The
		// engine checks the token ids; pdlb needs the shape only.
		key, v = "input_ids", last.inputIDs
		if v[0] != '[' {
			return mustBe("input_ids", "a list of token ids or a list of such lists", v)
		}
		start, _, ok := nextItem(v, 1)
		if !ok {
			return errors.New("input_ids: an empty list is not a request")
		}
		if v[start] != '[' {
			return nil
		}
		n, bad, badItem := countItems(v, '[')
		if bad >= 0 {
			return fmt.Errorf("input_ids: item %d of the batch must be a list, got %s", bad, truncate(badItem, 40))
		}
		r.batch = n
	}
	if r.batch > maxBatch {
		return fmt.Errorf("%s: batch of %d items exceeds limits.max_batch_size (%d)", key, r.batch, maxBatch)
	}
	return nil
}

// decideRID reads rid as GenerateReqInput and the OpenAI request models
// take it (Optional[Union[List[str], str]]). A list on a /generate batch
// needs one rid per item, as GenerateReqInput._normalize_rid checks.
func (r *pdRequest) decideRID(v string, vs span) error {
	if v == "" || v == "null" {
		return nil
	}
	switch v[0] {
	case '"':
	case '[':
		n, bad, badItem := countItems(v, '"')
		if bad >= 0 {
			return fmt.Errorf("rid: item %d must be a string, got %s", bad, truncate(badItem, 40))
		}
		if r.batch > 0 && n != r.batch {
			return fmt.Errorf("rid: a list of %d rids for a batch of %d items", n, r.batch)
		}
	default:
		return mustBe("rid", "a string or a list of strings", v)
	}
	r.rid = vs
	return nil
}

func mustBe(key, what, got string) error {
	return fmt.Errorf("%s: must be %s, got %s", key, what, truncate(got, 40))
}

// laxBool reads a JSON value as pydantic's lax bool does: true and false;
// the numbers 0 and 1 (floats too, as Python's float() rounds them); and,
// ignoring ASCII case, the strings 0, f, n, no, off, false and 1, t, y, on,
// yes, true. Anything else (null included) is not a bool.
func laxBool(v string) (value, ok bool) {
	switch v[0] {
	case 't':
		return true, true
	case 'f':
		return false, true
	case 'n', '[', '{':
		return false, false
	case '"':
		var buf [8]byte
		w, ok := unquoteShort(v, buf[:])
		if !ok {
			return false, false
		}
		switch {
		case w == "0", equalFoldASCII(w, "f"), equalFoldASCII(w, "n"), equalFoldASCII(w, "no"),
			equalFoldASCII(w, "off"), equalFoldASCII(w, "false"):
			return false, true
		case w == "1", equalFoldASCII(w, "t"), equalFoldASCII(w, "y"), equalFoldASCII(w, "on"),
			equalFoldASCII(w, "yes"), equalFoldASCII(w, "true"):
			return true, true
		}
		return false, false
	}
	if !strings.ContainsAny(v, ".eE") {
		// A Python int: only 0 and 1 are bools.
		switch v {
		case "0", "-0":
			return false, true
		case "1":
			return true, true
		}
		return false, false
	}
	// A Python float: 1e-400 is 0.0, 1e400 is inf (not a bool).
	f, _ := strconv.ParseFloat(v, 64)
	switch f {
	case 0:
		return false, true
	case 1:
		return true, true
	}
	return false, false
}

// readRank reads a DP-rank member; ok is false when it is absent or null.
func readRank(key, v string) (rank int64, ok bool, err error) {
	if v == "" || v == "null" {
		return 0, false, nil
	}
	if (v[0] != '-' && (v[0] < '0' || v[0] > '9')) || strings.ContainsAny(v, ".eE") {
		return 0, false, mustBe(key, "an integer", v)
	}
	rank, perr := strconv.ParseInt(v, 10, 64)
	if perr != nil {
		return 0, false, fmt.Errorf("%s: %s is out of range", key, truncate(v, 40))
	}
	return rank, true, nil
}

// countItems counts the items of the JSON array v and returns the position
// and text of the first one that does not start with first (-1: none).
func countItems(v string, first byte) (n, bad int, badItem string) {
	bad = -1
	for i := 1; ; n++ {
		start, end, ok := nextItem(v, i)
		if !ok {
			return n, bad, badItem
		}
		if bad < 0 && v[start] != first {
			bad, badItem = n, v[start:end]
		}
		i = end
	}
}

// nextItem finds the item of the JSON array v that follows position i
// (just past the '[' or the previous item); ok is false at the closing ']'.
func nextItem(v string, i int) (start, end int, ok bool) {
	i = skipSpace(v, i)
	if i < len(v) && v[i] == ',' {
		i = skipSpace(v, i+1)
	}
	if i >= len(v) || v[i] == ']' {
		return i, i, false
	}
	return i, skipValue(v, i), true
}

// skipValue returns the end of the JSON value that starts at s[i]. s is
// valid JSON; strings are skipped without being decoded.
func skipValue(s string, i int) int {
	switch s[i] {
	case '"':
		return skipString(s, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(s); j++ {
			switch s[j] {
			case '"':
				j = skipString(s, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return len(s)
	}
	j := i
	for j < len(s) && s[j] != ',' && s[j] != '}' && s[j] != ']' && !isSpace(s[j]) {
		j++
	}
	return j
}

// skipString returns the end of the JSON string that starts at s[i].
func skipString(s string, i int) int {
	for j := i + 1; ; {
		k := strings.IndexByte(s[j:], '"')
		if k < 0 {
			return len(s)
		}
		j += k + 1
		// The quote is escaped when an odd number of backslashes precede it.
		bs := 0
		for p := j - 2; p > i && s[p] == '\\'; p-- {
			bs++
		}
		if bs%2 == 0 {
			return j
		}
	}
}

// unquoteShort decodes the JSON string raw (quotes included) into buf when
// its value fits; ok is false when it does not. It is for comparing with
// ASCII names and words: a \u escape of a non-ASCII character decodes to
// 0xFF, which none of them contains. Only a string with escapes is copied.
func unquoteShort(raw string, buf []byte) (string, bool) {
	v := raw[1 : len(raw)-1]
	if strings.IndexByte(v, '\\') < 0 {
		return v, len(v) <= len(buf)
	}
	n := 0
	for i := 0; i < len(v); i++ {
		if n == len(buf) {
			return "", false
		}
		c := v[i]
		if c == '\\' && i+1 < len(v) {
			i++
			switch c = v[i]; c {
			case 'b':
				c = '\b'
			case 'f':
				c = '\f'
			case 'n':
				c = '\n'
			case 'r':
				c = '\r'
			case 't':
				c = '\t'
			case 'u':
				c = 0xFF
				if i+4 < len(v) {
					if u, err := strconv.ParseUint(v[i+1:i+5], 16, 16); err == nil && u < 0x80 {
						c = byte(u)
					}
				}
				i += 4
			}
		}
		buf[n] = c
		n++
	}
	return string(buf[:n]), true
}

// equalFoldASCII compares w with the lower-case word lower, ignoring ASCII
// case only (as pydantic does: no Unicode folding).
func equalFoldASCII(w, lower string) bool {
	if len(w) != len(lower) {
		return false
	}
	for i := 0; i < len(w); i++ {
		c := w[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
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
