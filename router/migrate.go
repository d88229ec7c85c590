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
// A batch continues its unfinished items as a batch of their own, each
// event given back its item's index (continuedWriter).
//
// Only what the relay of an unbroken stream must keep costs anything on the
// hot path: a copy of the last event in a reused buffer (proxy
// Exchange.Resumable; per item for a batch). Everything else happens once a
// stream broke.

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
// if its decode breaks mid-way: /generate with text or input_ids prompts
// (one, or a batch). Logprobs (the merge with the prefill's) and the OpenAI
// routes (SGLang's chat template cannot be asked to continue an assistant
// message from pdlb's side without re-templating) end with the error event
// as before.
func (q *request) migratable() bool {
	p := &q.parsed
	if q.r.cfg().Retry.MigrationLimit <= 0 || q.route != "/generate" || !p.stream ||
		p.returnLogprob || p.prompt.end <= p.prompt.start {
		return false
	}
	switch q.body[p.prompt.start] {
	case '"', '[':
	default:
		return false
	}
	if p.batch == 0 {
		return true
	}
	// A batch whose items differ in anything but their prompt and rid (a
	// list of sampling_params, image_data, lora_path…) is not continued:
	// pdlb would have to cut every such list to the items left.
	ok := true
	gjson.ParseBytes(q.body).ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "text", "input_ids", "rid", "bootstrap_host", "bootstrap_port", "bootstrap_room":
			return true
		}
		ok = !v.IsArray()
		return ok
	})
	return ok
}

// migrate continues a stream whose decode broke (res.Resumable) on a fresh
// pair. It returns the continuation, to be relayed through *cw (made or
// re-primed here), or nil when the client's stream has been ended here
// (an error event, or [DONE] when the answer was already whole).
func (q *request) migrate(w *chunkWriter, cw **continuedWriter, res *proxy.RelayResult) *proxy.Stream {
	broken := res.Err
	from := q.decode
	limit := q.r.cfg().Retry.MigrationLimit
	if q.migrations >= limit {
		return q.endMigration(w, migrationExhausted, broken, fmt.Errorf("retry.migration_limit %d reached", limit))
	}
	q.migrations++
	if q.migrations == 1 {
		q.origParsed = q.parsed
	}
	// What each item's client has: the last event it got (a batch's and a
	// continuation's are kept by *cw, a single first leg's by the relay).
	var lasts [][]byte
	switch {
	case *cw != nil:
		for i := range (*cw).items {
			lasts = append(lasts, (*cw).items[i].last)
		}
	default:
		lasts = [][]byte{res.Last}
	}
	sents := make([]sent, len(lasts))
	var pending []int
	for i, last := range lasts {
		s := sent{text: []byte(`""`), ids: []byte(`[]`)} // an item that got no event yet
		if len(last) > 0 {
			var err error
			if s, err = readSent(last); err != nil {
				return q.endMigration(w, migrationFailed, broken, err)
			}
		}
		sents[i] = s
		if !s.finished {
			pending = append(pending, i)
		}
	}
	var body []byte
	var err error
	if len(pending) > 0 {
		// Always from the client's own body (kept in q.own), with everything
		// sent so far: a second continuation must not extend the first's prompt.
		body, err = continuation(q.own.B, &q.origParsed, sents, pending, q.migrations)
	}
	if err != nil {
		return q.endMigration(w, migrationFailed, broken, err)
	}
	if body == nil { // every item had its last token: only [DONE] was missing
		q.r.metrics.Migration(migrationFinished)
		q.r.log.Warn().Str("request_id", q.id).Str("decode", from).Err(broken).
			Msg("decode broke after the last token: ending the stream with [DONE]")
		w.Write(doneEvent)
		w.Flush()
		return nil
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
		Str("to_decode", q.decode).Str("to_prefill", q.prefill).Int("items", len(pending)).
		Int("tokens_sent", sents[pending[0]].tokens).Err(broken).
		Msg("decode broke mid-stream: continuing the client's stream on a fresh pair")
	if *cw == nil {
		*cw = newContinuedWriter(w, false, 1)
	}
	(*cw).prime(sents, pending)
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

// continuation builds the body of the n-th continuation of a request from
// the client's: the prompt of each pending item extended by what was sent
// (a batch keeps only its pending items, in order), max_new_tokens reduced
// by it, the client's rid (if any) renamed "m<n>-<rid>" — never a prefix of
// the broken leg's or the other way round, as SGLang aborts by prefix.
// pdlb's own rids differ per attempt already (their room). It returns nil,
// nil when no token is left to generate.
func continuation(body []byte, p *pdRequest, sents []sent, pending []int, n int) ([]byte, error) {
	var edits []edit
	prompt := body[p.prompt.start:p.prompt.end]
	tokens := sents[pending[0]].tokens
	if p.batch == 0 {
		v, err := extendPrompt(prompt, &sents[0])
		if err != nil {
			return nil, err
		}
		edits = append(edits, edit{p.prompt.start, p.prompt.end, v})
	} else {
		items := gjson.ParseBytes(prompt).Array()
		if len(items) != p.batch || len(sents) != p.batch {
			return nil, errors.New("the batch's prompts do not match its items")
		}
		v := []byte{'['}
		for k, i := range pending {
			if sents[i].tokens != tokens {
				return nil, errors.New("the batch's items stopped at different lengths")
			}
			e, err := extendPrompt([]byte(items[i].Raw), &sents[i])
			if err != nil {
				return nil, err
			}
			if k > 0 {
				v = append(v, ',')
			}
			v = append(v, e...)
		}
		edits = append(edits, edit{p.prompt.start, p.prompt.end, append(v, ']')})
	}
	sp := gjson.GetBytes(body, "sampling_params")
	switch {
	case sp.IsObject():
		m := sp.Get("max_new_tokens")
		switch {
		case m.Type == gjson.Number:
			left := m.Int() - int64(tokens)
			if left <= 0 {
				return nil, nil
			}
			at := m.Index // gjson: the offset in body, even through sp
			if at <= 0 || at >= len(body) || body[at] != m.Raw[0] {
				return nil, errors.New("cannot locate sampling_params.max_new_tokens")
			}
			edits = append(edits, edit{at, at + len(m.Raw), strconv.AppendInt(nil, left, 10)})
		case !m.Exists() || m.Type == gjson.Null:
			left := sglangDefaultMaxNewTokens - tokens
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
		left := sglangDefaultMaxNewTokens - tokens
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
		var r []byte
		switch {
		case v[0] == '"':
			r = renameRID(nil, v, n)
		case v[0] == '[' && p.batch > 0: // one per item: the pending items'
			rids := gjson.ParseBytes(v).Array()
			if len(rids) != p.batch {
				return nil, errors.New("the client's rids do not match the batch")
			}
			r = append(r, '[')
			for k, i := range pending {
				if k > 0 {
					r = append(r, ',')
				}
				r = renameRID(r, []byte(rids[i].Raw), n)
			}
			r = append(r, ']')
		default:
			return nil, errors.New("the client's rid is not a string")
		}
		edits = append(edits, edit{p.rid.start, p.rid.end, r})
	}
	slices.SortFunc(edits, func(a, b edit) int { return a.start - b.start })
	out := make([]byte, 0, len(body)+256)
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

// extendPrompt is one prompt followed by what its item sent: text + the
// generated text, or input_ids + output_ids.
func extendPrompt(prompt []byte, s *sent) ([]byte, error) {
	switch prompt[0] {
	case '"':
		text := gjson.ParseBytes(prompt).String() + gjson.ParseBytes(s.text).String()
		return gjson.AppendJSONString(nil, text), nil
	case '[':
		ids := listInner(prompt)
		if out := listInner(s.ids); len(out) > 0 {
			if len(ids) > 0 {
				ids = append(slices.Clip(ids), ',')
			}
			ids = append(ids, out...)
		}
		return append(append([]byte{'['}, ids...), ']'), nil
	}
	return nil, errors.New("the prompt is neither text nor input_ids")
}

// renameRID appends the raw JSON string rid as "m<n>-<rid>".
func renameRID(dst, rid []byte, n int) []byte {
	if len(rid) < 2 || rid[0] != '"' {
		return append(dst, rid...)
	}
	dst = append(append(dst, '"', 'm'), strconv.Itoa(n)...)
	return append(append(dst, '-'), rid[1:]...)
}

// listInner is a JSON list's raw value without its brackets and spaces.
func listInner(raw []byte) []byte {
	raw = bytes.TrimSpace(raw)
	if len(raw) < 2 {
		return nil
	}
	return bytes.TrimSpace(raw[1 : len(raw)-1])
}

// continuedWriter sits between a relay and the client's writer of a
// migratable stream that needs it: a batch's first leg, which it only
// records (the last event of each item, by index), and every continuation,
// whose events it rewrites so the client reads one answer per item: text
// and output_ids prefixed with what the item already got (SGLang streams
// both cumulatively), completion_tokens counting the whole answer,
// meta_info.id the first leg's, the item's index the client's. A single
// stream's first leg goes straight to the client's writer (the relay
// keeps its last event).
type continuedWriter struct {
	w       *chunkWriter
	batch   bool
	rewrite bool
	items   []itemState // by the client's index
	sub     []int       // the running leg's index → the client's
	buf     []byte
}

// itemState is one item of the answer as the client has it.
type itemState struct {
	last []byte // the last event it got ("data: {…}")
	// What it had when the running continuation started: the raw text
	// without its closing quote, the raw ids without brackets, the raw
	// meta_info.id, the token count.
	text, ids, id []byte
	tokens        int64
}

func newContinuedWriter(w *chunkWriter, batch bool, items int) *continuedWriter {
	return &continuedWriter{w: w, batch: batch, items: make([]itemState, items)}
}

// prime sets what the client got before the continuation of the pending items.
func (c *continuedWriter) prime(sents []sent, pending []int) {
	for _, i := range pending {
		it, s := &c.items[i], &sents[i]
		it.text = append(it.text[:0], s.text[:len(s.text)-1]...)
		it.ids = append(it.ids[:0], listInner(s.ids)...)
		it.id = append(it.id[:0], s.id...)
		it.tokens = int64(s.tokens)
	}
	c.sub = append(c.sub[:0], pending...)
	c.rewrite = true
}

// Write takes one event and its blank line (proxy.Stream.Relay's unit).
func (c *continuedWriter) Write(p []byte) (int, error) {
	d, ok := bytes.CutPrefix(bytes.TrimSuffix(p, []byte("\n\n")), []byte("data:"))
	d = bytes.TrimSpace(d)
	if !ok || len(d) == 0 || d[0] != '{' {
		return c.w.Write(p) // [DONE], or what pdlb does not rewrite
	}
	i := 0
	var index gjson.Result
	if c.batch {
		index = gjson.GetBytes(d, "index")
		j := int(index.Int())
		if index.Type != gjson.Number || index.Index <= 0 || j < 0 {
			return c.w.Write(p)
		}
		i = j
		if c.rewrite {
			if j >= len(c.sub) {
				return c.w.Write(p)
			}
			i = c.sub[j]
		}
	}
	if i >= len(c.items) {
		return c.w.Write(p)
	}
	it := &c.items[i]
	c.buf = append(c.buf[:0], "data: "...)
	if !c.rewrite {
		c.buf = append(c.buf, d...)
	} else {
		r := gjson.GetManyBytes(d, "text", "output_ids", "meta_info.completion_tokens", "meta_info.id")
		var edits []edit
		if t := r[0]; t.Type == gjson.String && t.Index > 0 {
			edits = append(edits, edit{t.Index, t.Index + len(t.Raw), append(slices.Clip(it.text), t.Raw[1:]...)})
		}
		if ids := r[1]; ids.IsArray() && ids.Index > 0 {
			v := append([]byte{'['}, it.ids...)
			if in := listInner([]byte(ids.Raw)); len(in) > 0 {
				if len(it.ids) > 0 {
					v = append(v, ',')
				}
				v = append(v, in...)
			}
			edits = append(edits, edit{ids.Index, ids.Index + len(ids.Raw), append(v, ']')})
		}
		// Results of a path hold their offset in d (gjson's Index).
		if ct := r[2]; ct.Type == gjson.Number && ct.Index > 0 {
			edits = append(edits, edit{ct.Index, ct.Index + len(ct.Raw), strconv.AppendInt(nil, it.tokens+ct.Int(), 10)})
		}
		if id := r[3]; id.Exists() && id.Index > 0 && len(it.id) > 0 {
			edits = append(edits, edit{id.Index, id.Index + len(id.Raw), it.id})
		}
		if c.batch {
			edits = append(edits, edit{index.Index, index.Index + len(index.Raw), strconv.AppendInt(nil, int64(i), 10)})
		}
		slices.SortFunc(edits, func(a, b edit) int { return a.start - b.start })
		at := 0
		for _, e := range edits {
			if e.start < at || e.end > len(d) {
				return c.w.Write(p) // not what it looked like: as is
			}
			c.buf = append(append(c.buf, d[at:e.start]...), e.repl...)
			at = e.end
		}
		c.buf = append(c.buf, d[at:]...)
	}
	it.last = append(it.last[:0], c.buf...)
	c.buf = append(c.buf, "\n\n"...)
	if _, err := c.w.Write(c.buf); err != nil {
		return 0, err
	}
	return len(c.buf), nil
}

// Flush flushes the client's writer.
func (c *continuedWriter) Flush() error { return c.w.Flush() }
