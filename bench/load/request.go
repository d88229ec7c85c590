package load

import (
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
)

// worker owns everything one in-flight request needs, reused request after request,
// and the samples it recorded.
type worker struct {
	t      *target
	opts   *Options
	plan   *roundPlan
	req    fasthttp.Request
	resp   fasthttp.Response
	body   []byte
	sse    sseReader
	stats  stats
	gapRec func(time.Duration)
	// session, when set (multiturn), is sent as X-Session-ID: the routing
	// key of a balancer's sticky policy (pdlb's consistent_hashing).
	session []byte
}

func newWorker(t *target, plan *roundPlan) *worker {
	w := &worker{t: t, opts: plan.opts, plan: plan}
	w.gapRec = w.stats.itl.record
	return w
}

// do sends request number idx and records its outcome; start is when it was due,
// which in open loop may lie before now (latency counts the wait for a free slot).
func (w *worker) do(idx uint64, start time.Time) {
	r := splitmix64(w.plan.seed ^ idx)
	inLen := w.opts.InputLen.pick(r)
	outLen := w.opts.OutputLen.pick(r >> 32)
	words := inLen
	if w.opts.Workload == WorkloadNone {
		w.body = appendBody(w.body[:0], w.opts.Route, idx, inLen, outLen, w.opts.Stream)
	} else {
		w.body, words = w.plan.prompts.appendIndexed(w.body[:0], r, w.plan.salt, idx, inLen, outLen, w.opts.Stream)
	}
	if w.opts.Room {
		w.body = appendRoom(w.body, idx)
	}
	w.send(start, int64(words))
}

// send posts w.body, records the outcome and returns the answer's JSON (the whole body,
// or a stream's last event), valid until the next send; nil when the request failed.
// promptWords is the prompt's length in words, counted as prompt tokens when the answer
// does not say how many the engine saw.
func (w *worker) send(start time.Time, promptWords int64) []byte {
	req, resp := &w.req, &w.resp
	req.Reset()
	resp.Reset()
	req.SetRequestURI(w.t.uri)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	if w.t.auth != "" {
		req.Header.Set(fasthttp.HeaderAuthorization, w.t.auth)
	}
	if len(w.session) > 0 {
		req.Header.SetBytesV(HeaderSessionID, w.session)
	}
	req.SetBodyRaw(w.body)
	resp.StreamBody = w.opts.Stream

	err := w.t.client.DoDeadline(req, resp, start.Add(w.opts.Timeout))
	if err != nil {
		w.stats.fail(classify(err))
		return nil
	}
	if w.opts.Stream {
		return w.readStream(start, promptWords)
	}
	end := time.Now()
	if code := resp.StatusCode(); code != fasthttp.StatusOK {
		w.stats.fail(statusClass(code))
		return nil
	}
	b := resp.Body()
	if !gjson.ValidBytes(b) {
		w.stats.fail(ErrBadBody)
		return nil
	}
	w.stats.ok(end.Sub(start), withPromptWords(answerUsage(b), promptWords))
	return b
}

func (w *worker) readStream(start time.Time, promptWords int64) []byte {
	resp := &w.resp
	defer resp.CloseBodyStream() //nolint:errcheck // the outcome is already recorded
	if code := resp.StatusCode(); code != fasthttp.StatusOK {
		w.stats.fail(statusClass(code))
		return nil
	}
	res, err := w.sse.read(resp.BodyStream(), start, w.gapRec)
	end := time.Now()
	w.stats.events += int64(res.events)
	switch {
	case err != nil:
		w.stats.fail(classify(err))
	case res.errEvent:
		w.stats.fail(ErrStreamError)
	case !res.done:
		w.stats.fail(ErrStreamTruncated)
	default:
		// The last event carries the totals (SGLang's meta_info, OpenAI's usage chunk).
		u := withPromptWords(answerUsage(w.sse.last), promptWords)
		if u.completion <= 0 {
			u.completion = int64(res.events) // an engine that reports no count: one token per event
		}
		w.stats.ok(end.Sub(start), u)
		w.stats.ttft = append(w.stats.ttft, res.ttft)
		return w.sse.last
	}
	return nil
}

// withPromptWords fills in the prompt length when the answer did not report one: the
// simulated engines count one token per whitespace-separated word, as the prompt was built.
func withPromptWords(u usage, words int64) usage {
	if u.prompt <= 0 {
		u.prompt = words
	}
	return u
}
