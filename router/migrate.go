package router

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"pdlb/proxy"
)

// Mid-stream migration (retry.migration_limit): when the decode of a
// /generate stream breaks after events reached the client, the request is
// re-issued on a fresh pair with the prompt plus the tokens already sent
// (input_ids + output_ids, or text + generated text), max_new_tokens
// reduced, a rid of its own, and everything else (sampling parameters,
// seed) as the client sent it; the new decode's events are rewritten so the
// client reads one answer: cumulative text and output_ids, completion_tokens
// over the whole answer, the first leg's meta_info.id, one [DONE].
//
// Only what the relay of an unbroken stream must keep costs anything on the
// hot path: a copy of the last event in a reused buffer (proxy
// Exchange.Resumable). Everything else happens once a stream broke.

// sglangDefaultMaxNewTokens is SGLang's sampling_params.max_new_tokens when
// a request names none: the continuation of such a request asks for what
// is left of it.
const sglangDefaultMaxNewTokens = 128

// Results of a migration (pdlb_migrations_total{result}).
const (
	migrationResumed   = "resumed"   // a continuation stream was committed
	migrationFinished  = "finished"  // the answer was complete: only [DONE] was missing
	migrationFailed    = "failed"    // no continuation could start: the error event ends the stream
	migrationExhausted = "exhausted" // retry.migration_limit reached: the error event ends the stream
)

// migratable reports whether this stream may be continued on a fresh pair
// if its decode breaks mid-way: a single /generate item with a text or
// input_ids prompt. Batches, logprobs (the merge with the prefill's) and
// the OpenAI routes (SGLang's chat template cannot be asked to continue an
// assistant message from pdlb's side without re-templating) end with the
// error event as before.
func (q *request) migratable() bool {
	p := &q.parsed
	if q.r.cfg().Retry.MigrationLimit <= 0 || q.route != "/generate" || !p.stream || p.batch > 0 ||
		p.returnLogprob || p.prompt.end <= p.prompt.start {
		return false
	}
	switch q.body[p.prompt.start] {
	case '"', '[':
		return true
	}
	return false
}

// migrate continues a stream whose decode broke (res.Resumable) on a fresh
// pair. It returns the continuation, to be relayed through *cw (made or
// re-primed here), or nil when the client's stream has been ended here
// (an error event, or [DONE] when the answer was already whole).
func (q *request) migrate(w *chunkWriter, cw **continuedWriter, res *proxy.RelayResult) *proxy.Stream {
	broken := res.Err
	last := res.Last
	if *cw != nil {
		last = (*cw).last // what the client saw, not the engine's bytes
	}
	from := q.decode
	limit := q.r.cfg().Retry.MigrationLimit
	if q.migrations >= limit {
		return q.endMigration(w, migrationExhausted, broken, fmt.Errorf("retry.migration_limit %d reached", limit))
	}
	q.migrations++
	sent, err := readSent(last)
	if err != nil {
		return q.endMigration(w, migrationFailed, broken, err)
	}
	if sent.finished {
		q.r.metrics.Migration(migrationFinished)
		q.r.log.Warn().Str("request_id", q.id).Str("decode", from).Err(broken).
			Msg("decode broke after the last token: ending the stream with [DONE]")
		w.Write(doneEvent)
		w.Flush()
		return nil
	}
	// Always from the client's own body (kept in q.own), with everything
	// sent so far: a second continuation must not extend the first's prompt.
	if q.migrations == 1 {
		q.origParsed = q.parsed
	}
	body, err := continuation(q.own.B, &q.origParsed, &sent, q.migrations)
	if err == nil && body == nil {
		q.r.metrics.Migration(migrationFinished)
		w.Write(doneEvent)
		w.Flush()
		return nil
	}
	if err != nil {
		return q.endMigration(w, migrationFailed, broken, err)
	}
	p, perr := parseRequest(body, parseOptions{generate: true, maxBatch: q.r.cfg().Limits.MaxBatchSize})
	if perr != nil {
		return q.endMigration(w, migrationFailed, broken, perr)
	}
	q.body, q.parsed = body, p
	q.failedPairs = append(q.failedPairs, Pair{q.prefill, q.decode}) // another pair when one serves
	attempts := q.attempts
	s := q.exchange()
	q.attempts += attempts
	if s == nil {
		if q.status == statusClientGone { // left while the continuation was sought: no one to tell
			q.r.metrics.Migration(migrationFailed)
			q.err = proxy.ErrClientGone
			return nil
		}
		cause := q.err
		q.status = 200 // the client's stream had its 200 long ago
		return q.endMigration(w, migrationFailed, broken, cause)
	}
	q.err = nil
	q.r.metrics.Migration(migrationResumed)
	q.r.log.Warn().Str("request_id", q.id).Int("migration", q.migrations).Str("from_decode", from).
		Str("to_decode", q.decode).Str("to_prefill", q.prefill).Int("tokens_sent", sent.tokens).Err(broken).
		Msg("decode broke mid-stream: continuing the client's stream on a fresh pair")
	if *cw == nil {
		*cw = &continuedWriter{w: w}
	}
	(*cw).prime(&sent)
	return s
}

// endMigration ends the client's stream with the error event for broken
// (what the relay writes without migration) and counts the result.
func (q *request) endMigration(w *chunkWriter, result string, broken error, why error) *proxy.Stream {
	q.r.metrics.Migration(result)
	q.r.log.Warn().Str("request_id", q.id).Str("decode", q.decode).Str("result", result).
		Err(broken).AnErr("migration", why).Msg("decode broke mid-stream; not migrated")
	var uerr *proxy.UpstreamError
	if !errors.As(broken, &uerr) {
		uerr = &proxy.UpstreamError{Kind: proxy.KindProtocol, Err: broken}
	}
	q.bytes += proxy.WriteStreamError(w, uerr)
	q.err = broken
	return nil
}

var doneEvent = []byte("data: [DONE]\n\n")

// sent is what the client has received of the answer, read from the last
// event it got: raw JSON pieces, spliced as they are.
type sent struct {
	text     []byte // the text member's raw value (a JSON string)
	ids      []byte // output_ids' raw value (a JSON list)
	id       []byte // meta_info.id's raw value (nil when absent)
	tokens   int
	finished bool // finish_reason set: the answer is whole
}

// readSent reads the last event the client got.
func readSent(ev []byte) (sent, error) {
	d, ok := bytes.CutPrefix(ev, []byte("data:"))
	d = bytes.TrimSpace(d)
	if !ok || !gjson.ValidBytes(d) {
		return sent{}, errors.New("the last event sent is not a JSON data event")
	}
	r := gjson.GetManyBytes(d, "text", "output_ids", "meta_info.id", "meta_info.finish_reason")
	if r[0].Type != gjson.String || !r[1].IsArray() {
		return sent{}, errors.New("the last event sent has no text and output_ids")
	}
	s := sent{text: []byte(r[0].Raw), ids: []byte(r[1].Raw), tokens: len(r[1].Array())}
	if r[2].Exists() {
		s.id = []byte(r[2].Raw)
	}
	s.finished = r[3].Exists() && r[3].Type != gjson.Null
	return s, nil
}

// edit replaces body[start:end] with repl.
type edit struct {
	start, end int
	repl       []byte
}

// continuation builds the body of the n-th continuation of a request: its
// prompt extended by what was sent, max_new_tokens reduced by it, the
// client's rid (if any) renamed "m<n>-<rid>" — never a prefix of the
// broken leg's or the other way round, as SGLang aborts by prefix. pdlb's
// own rids differ per attempt already (their room). It returns nil, nil
// when no token is left to generate.
func continuation(body []byte, p *pdRequest, s *sent, n int) ([]byte, error) {
	var edits []edit
	prompt := body[p.prompt.start:p.prompt.end]
	switch prompt[0] {
	case '"': // text: the prompt + the generated text
		text := gjson.ParseBytes(prompt).String() + gjson.ParseBytes(s.text).String()
		edits = append(edits, edit{p.prompt.start, p.prompt.end, gjson.AppendJSONString(nil, text)})
	case '[': // input_ids + output_ids
		ids := listInner(prompt)
		if out := listInner(s.ids); len(out) > 0 {
			if len(ids) > 0 {
				ids = append(slices.Clip(ids), ',')
			}
			ids = append(ids, out...)
		}
		edits = append(edits, edit{p.prompt.start, p.prompt.end, append(append([]byte{'['}, ids...), ']')})
	default:
		return nil, errors.New("the prompt is neither text nor input_ids")
	}
	sp := gjson.GetBytes(body, "sampling_params")
	switch {
	case sp.IsObject():
		m := sp.Get("max_new_tokens")
		switch {
		case m.Type == gjson.Number:
			left := m.Int() - int64(s.tokens)
			if left <= 0 {
				return nil, nil
			}
			at := m.Index // gjson: the offset in body, even through sp
			if at <= 0 || at >= len(body) || body[at] != m.Raw[0] {
				return nil, errors.New("cannot locate sampling_params.max_new_tokens")
			}
			edits = append(edits, edit{at, at + len(m.Raw), strconv.AppendInt(nil, left, 10)})
		case !m.Exists() || m.Type == gjson.Null:
			left := sglangDefaultMaxNewTokens - s.tokens
			if left <= 0 {
				return nil, nil
			}
			if m.Exists() { // null
				at := m.Index
				if at <= 0 || at >= len(body) || body[at] != 'n' {
					return nil, errors.New("cannot locate sampling_params.max_new_tokens")
				}
				edits = append(edits, edit{at, at + len(m.Raw), strconv.AppendInt(nil, int64(left), 10)})
				break
			}
			if sp.Index <= 0 {
				return nil, errors.New("cannot locate sampling_params")
			}
			open := sp.Index + strings.IndexByte(sp.Raw, '{') + 1
			member := strconv.AppendInt([]byte(`"max_new_tokens":`), int64(left), 10)
			if len(sp.Map()) > 0 {
				member = append(member, ',')
			}
			edits = append(edits, edit{open, open, member})
		default:
			return nil, errors.New("sampling_params.max_new_tokens is not a number")
		}
	case !sp.Exists() || sp.Type == gjson.Null:
		left := sglangDefaultMaxNewTokens - s.tokens
		if left <= 0 {
			return nil, nil
		}
		member := strconv.AppendInt([]byte(`{"max_new_tokens":`), int64(left), 10)
		member = append(member, '}')
		if sp.Exists() {
			if sp.Index <= 0 {
				return nil, errors.New("cannot locate sampling_params")
			}
			edits = append(edits, edit{sp.Index, sp.Index + len(sp.Raw), member})
		} else {
			open := bytes.IndexByte(body, '{') + 1
			edits = append(edits, edit{open, open, append(append([]byte(`"sampling_params":`), member...), ',')})
		}
	default:
		return nil, errors.New("sampling_params is not an object")
	}
	if p.rid.end > p.rid.start {
		v := body[p.rid.start:p.rid.end]
		if v[0] != '"' {
			return nil, errors.New("the client's rid is not a string")
		}
		r := append([]byte{'"', 'm'}, strconv.Itoa(n)...)
		r = append(append(r, '-'), v[1:]...)
		edits = append(edits, edit{p.rid.start, p.rid.end, r})
	}
	slices.SortFunc(edits, func(a, b edit) int { return a.start - b.start })
	out := make([]byte, 0, len(body)+len(s.text)+len(s.ids)+32)
	at := 0
	for _, e := range edits {
		if e.start < at {
			return nil, errors.New("overlapping members")
		}
		out = append(append(out, body[at:e.start]...), e.repl...)
		at = e.end
	}
	return append(out, body[at:]...), nil
}

// listInner is a JSON list's raw value without its brackets and spaces.
func listInner(raw []byte) []byte {
	raw = bytes.TrimSpace(raw)
	if len(raw) < 2 {
		return nil
	}
	return bytes.TrimSpace(raw[1 : len(raw)-1])
}

// continuedWriter rewrites a continuation's events so the client reads one
// answer: text and output_ids prefixed with what it already got (SGLang
// streams both cumulatively), completion_tokens counting the whole answer,
// meta_info.id the first leg's. It keeps the last event it wrote for a
// further migration. Only migrated streams pass through it.
type continuedWriter struct {
	w      *chunkWriter
	text   []byte // the raw JSON string sent so far, without its closing quote
	ids    []byte // the raw ids sent so far, without brackets
	id     []byte
	tokens int64
	last   []byte
	buf    []byte
}

// prime sets what the client got before this continuation.
func (c *continuedWriter) prime(s *sent) {
	c.text = append(c.text[:0], s.text[:len(s.text)-1]...)
	c.ids = append(c.ids[:0], listInner(s.ids)...)
	c.id = append(c.id[:0], s.id...)
	c.tokens = int64(s.tokens)
}

// Write takes one event and its blank line (proxy.Stream.Relay's unit).
func (c *continuedWriter) Write(p []byte) (int, error) {
	d, ok := bytes.CutPrefix(bytes.TrimSuffix(p, []byte("\n\n")), []byte("data:"))
	d = bytes.TrimSpace(d)
	if !ok || len(d) == 0 || d[0] != '{' {
		return c.w.Write(p) // [DONE], or what pdlb does not rewrite
	}
	r := gjson.GetManyBytes(d, "text", "output_ids", "meta_info.completion_tokens", "meta_info.id")
	var edits []edit
	if t := r[0]; t.Type == gjson.String && t.Index > 0 {
		edits = append(edits, edit{t.Index, t.Index + len(t.Raw), append(slices.Clip(c.text), t.Raw[1:]...)})
	}
	if ids := r[1]; ids.IsArray() && ids.Index > 0 {
		v := append(append([]byte{'['}, c.ids...), ']')
		if in := listInner([]byte(ids.Raw)); len(in) > 0 {
			if len(c.ids) > 0 {
				v = append(v[:len(v)-1], ',')
			} else {
				v = v[:len(v)-1]
			}
			v = append(append(v, in...), ']')
		}
		edits = append(edits, edit{ids.Index, ids.Index + len(ids.Raw), v})
	}
	// Results of a path hold their offset in d (gjson's Index).
	if ct := r[2]; ct.Type == gjson.Number && ct.Index > 0 {
		edits = append(edits, edit{ct.Index, ct.Index + len(ct.Raw), strconv.AppendInt(nil, c.tokens+ct.Int(), 10)})
	}
	if id := r[3]; id.Exists() && id.Index > 0 && len(c.id) > 0 {
		edits = append(edits, edit{id.Index, id.Index + len(id.Raw), c.id})
	}
	slices.SortFunc(edits, func(a, b edit) int { return a.start - b.start })
	c.buf = append(c.buf[:0], "data: "...)
	at := 0
	for _, e := range edits {
		if e.start < at || e.end > len(d) {
			return c.w.Write(p) // not what it looked like: as is
		}
		c.buf = append(append(c.buf, d[at:e.start]...), e.repl...)
		at = e.end
	}
	c.buf = append(c.buf, d[at:]...)
	c.last = append(c.last[:0], c.buf...)
	c.buf = append(c.buf, "\n\n"...)
	if _, err := c.w.Write(c.buf); err != nil {
		return 0, err
	}
	return len(c.buf), nil
}

// Flush flushes the client's writer.
func (c *continuedWriter) Flush() error { return c.w.Flush() }
