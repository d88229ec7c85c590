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
	seed   uint64
	req    fasthttp.Request
	resp   fasthttp.Response
	body   []byte
	sse    sseReader
	stats  stats
	gapRec func(time.Duration)
}

func newWorker(t *target, opts *Options, seed uint64) *worker {
	w := &worker{t: t, opts: opts, seed: seed}
	w.gapRec = w.stats.itl.record
	return w
}

// do sends request number idx and records its outcome; start is when it was due,
// which in open loop may lie before now (latency counts the wait for a free slot).
func (w *worker) do(idx uint64, start time.Time) {
	r := splitmix64(w.seed ^ idx)
	inLen := w.opts.InputLen.pick(r)
	outLen := w.opts.OutputLen.pick(r >> 32)
	w.body = appendBody(w.body[:0], w.opts.Route, idx, inLen, outLen, w.opts.Stream)
	if w.opts.Room {
		w.body = appendRoom(w.body, idx)
	}

	req, resp := &w.req, &w.resp
	req.Reset()
	resp.Reset()
	req.SetRequestURI(w.t.uri)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	req.SetBodyRaw(w.body)
	resp.StreamBody = w.opts.Stream

	err := w.t.client.DoDeadline(req, resp, start.Add(w.opts.Timeout))
	if err != nil {
		w.stats.fail(classify(err))
		return
	}
	if w.opts.Stream {
		w.readStream(start)
		return
	}
	end := time.Now()
	if code := resp.StatusCode(); code != fasthttp.StatusOK {
		w.stats.fail(statusClass(code))
		return
	}
	b := resp.Body()
	if !gjson.ValidBytes(b) {
		w.stats.fail(ErrBadBody)
		return
	}
	w.stats.ok(end.Sub(start), completionTokens(b))
}

func (w *worker) readStream(start time.Time) {
	resp := &w.resp
	defer resp.CloseBodyStream() //nolint:errcheck // the outcome is already recorded
	if code := resp.StatusCode(); code != fasthttp.StatusOK {
		w.stats.fail(statusClass(code))
		return
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
		tokens := int64(res.events)
		if n := completionTokens(w.sse.last); n > 0 {
			tokens = n // engines that batch tokens per event still report the true count
		}
		w.stats.ok(end.Sub(start), tokens)
		w.stats.ttft = append(w.stats.ttft, res.ttft)
	}
}

// completionTokens reads the generated token count of an SGLang or OpenAI-style answer.
func completionTokens(b []byte) int64 {
	res := gjson.GetManyBytes(b, "meta_info.completion_tokens", "usage.completion_tokens")
	if res[0].Exists() {
		return res[0].Int()
	}
	return res[1].Int()
}
