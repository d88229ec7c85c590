package router

import (
	"errors"
	"slices"
	"strconv"
	"sync"

	"github.com/valyala/bytebufferpool"
	"github.com/valyala/fasthttp"

	"pdlb"
	"pdlb/proxy"
)

// pdHandler serves a fan-out route (/generate and the OpenAI routes).
func (r *Router) pdHandler(route string, batchAware bool) fasthttp.RequestHandler {
	spanName := "POST " + route
	return func(ctx *fasthttp.RequestCtx) { r.servePD(ctx, route, spanName, batchAware) }
}

// servePD is the request path from top to bottom: admission, parsing, then
// the attempts (selection, injection, fan-out, retries before the first
// byte) and the answer. A stream leaves here at once for a goroutine of
// its own (stream.go), which then owns the request.
func (r *Router) servePD(ctx *fasthttp.RequestCtx, route, spanName string, batchAware bool) {
	q := r.newRequest(ctx, route)
	if r.tracer != nil {
		q.startTrace(ctx, spanName)
	}
	if q.admit(ctx) && q.parse(batchAware) && q.parsed.stream {
		q.serveStreamAsync(ctx)
		return
	}
	defer q.finish()
	if q.status != 0 {
		return // refused by admission or parsing
	}
	q.exchange() // a non-stream request commits no stream: its answer is in q.resp
}

// refusal is an attempt refused before any backend was contacted.
type refusal struct {
	status int
	msg    string
}

// exchange runs the attempts, retrying on a fresh pair before the first
// byte. It returns the committed stream of a stream request, to be
// relayed; otherwise the answer or the error is in q.resp.
func (q *request) exchange() *proxy.Stream {
	cfg := q.r.cfg()
	var exclude []*proxy.Backend
	var lastErr *proxy.UpstreamError
	all503 := true
	for attempt := 1; ; attempt++ {
		q.attempts = attempt
		q.startAttemptSpan(attempt, lastErr)
		ans, uerr, ref := q.attempt(exclude)
		if ans != nil {
			if ans.Stream == nil {
				q.endAttemptSpan(nil, refusal{}) // a stream's ends with the stream
			}
			return q.answer(ans)
		}
		q.endAttemptSpan(uerr, ref)
		if uerr == nil {
			if lastErr == nil || ref.status != fasthttp.StatusServiceUnavailable {
				if ref.status == fasthttp.StatusServiceUnavailable {
					q.unavailable(1, ref.msg)
				} else {
					q.fail(ref.status, pdlb.ErrInvalidRequest, ref.msg, errors.New(ref.msg))
				}
				return nil
			}
			break // retries ran out of backends: report the real failure
		}
		lastErr = uerr
		if errors.Is(uerr.Err, proxy.ErrClientGone) {
			q.status, q.err = statusClientGone, uerr
			return nil
		}
		all503 = all503 && uerr.Kind == proxy.KindStatus && uerr.Status == fasthttp.StatusServiceUnavailable
		pairFault := uerr.PairFault()
		if pairFault || uerr.AfterPrefill {
			q.pairFailed(uerr.Backend)
		}
		if attempt >= cfg.Retry.MaxAttempts || !uerr.Retryable() {
			break
		}
		if !pairFault { // a pair fault rules out the pair (q.failedPairs), not the decode
			exclude = append(exclude, uerr.Backend)
		}
		q.r.log.Warn().Str("request_id", q.id).Int("attempt", attempt).Err(uerr).Msg("retrying on another pair")
		q.r.metrics.Retry(q.route)
		if !q.backoff(backoff(cfg.Retry.Initial, cfg.Retry.Max, attempt)) {
			if q.status == statusClientGone {
				return nil
			}
			break
		}
		if q.abortsSent != nil {
			// The next attempt's legs carry the same rid (the client's):
			// the last one's aborts, bounded by abort.timeout, go first,
			// lest one reach an engine after the new leg and end it.
			q.abortsSent.Wait()
		}
	}
	q.failUpstream(lastErr, all503)
	return nil
}

// pairFailed counts the failure of the pair of this attempt's prefill and
// decode d against the pair (pair health) and keeps the rest of this
// request's attempts off it.
func (q *request) pairFailed(d *proxy.Backend) {
	k := Pair{q.prefill, d.URL}
	q.failedPairs = append(q.failedPairs, k)
	if avoided, until := q.r.pairs.failed(k.Prefill, k.Decode); avoided {
		q.r.log.Warn().Str("prefill", k.Prefill).Str("decode", k.Decode).Time("until", until).
			Msg("avoiding a prefill-decode pair whose KV transfers keep failing; both engines keep serving other pairs")
	}
}

// failUpstream answers with the last attempt's failure: a backend's 4xx
// as is (it is the client's answer); 503 with Retry-After when every
// attempt met an engine saying it is overloaded (the engine's own
// Retry-After when it sent one); otherwise 502, or 504 for a timeout.
func (q *request) failUpstream(last *proxy.UpstreamError, all503 bool) {
	status := last.ClientStatus()
	switch {
	case all503:
		retryAfter := 1
		if n, err := strconv.Atoi(string(last.RetryAfter)); err == nil && n >= 0 {
			retryAfter = n
		}
		pdlb.SetError(q.resp, fasthttp.StatusServiceUnavailable, pdlb.ErrUnavailable, last.Error())
		q.resp.Header.Set(fasthttp.HeaderRetryAfter, strconv.Itoa(retryAfter))
		status = fasthttp.StatusServiceUnavailable
	case last.Kind == proxy.KindStatus && status < 500:
		q.resp.SetStatusCode(last.Status)
		q.resp.Header.SetContentTypeBytes(last.ContentType)
		q.resp.SetBody(last.Body)
	default:
		pdlb.SetError(q.resp, status, pdlb.ErrUpstream, last.Error())
	}
	q.status, q.err = status, last
}

// attempt selects a pair, injects and runs one fan-out. It returns an
// answer, an upstream error, or a refusal made before any backend was
// contacted (no pair available, a bad DP rank).
func (q *request) attempt(exclude []*proxy.Backend) (*proxy.Answer, *proxy.UpstreamError, refusal) {
	r, req := q.r, &q.parsed
	pt, dt, msg := r.pickPair(q, exclude)
	if msg != "" {
		return nil, nil, refusal{fasthttp.StatusServiceUnavailable, msg}
	}
	p, d := pt.Backend(), dt.Backend()
	q.prefill, q.decode = p.URL, d.URL

	dpSize, status, msg := r.checkRank(p, req, q.deadline)
	if status != 0 {
		pt.Release()
		dt.Release()
		return nil, nil, refusal{status, msg}
	}
	ranks := dpRanks{prefill: -1, decode: -1}
	if dpSize > 0 {
		ranks.prefill = int(req.prefillRank) // the client's: it always wins
	} else if r.cfg().Policy.DPAware {
		dpSize, ranks = r.pickDPRanks(&pt, &dt)
	}
	bs := p.Bootstrap()
	in := injection{host: bs.Host, port: bs.Port, batch: req.batch > 0}
	if in.host == "" { // a prefill whose rendezvous was never set: its own host
		in.host = p.Host
	}
	var one [1]uint64
	if in.batch {
		in.rooms = make([]uint64, req.batch)
	} else {
		in.rooms = one[:]
	}
	for i := range in.rooms {
		in.rooms[i] = newRoom(dpSize, int64(ranks.prefill))
	}
	q.room = in.rooms[0]
	// Both bodies live in one pooled buffer that the proxy returns once both
	// legs have sent them, after the rid the engines will know the request
	// by (rid.go), which aborts name until the attempt ends.
	buf := bytebufferpool.Get()
	pIn, dIn := ranks.legs(&in)
	legs := 1 // bodies: ranks written per leg make two
	if pIn != dIn {
		legs = 2
	}
	ridCap, own := 0, false
	if r.cfg().Abort.Enabled {
		if req.rid.end > req.rid.start {
			ridCap = req.rid.end - req.rid.start // the client's, kept
		} else {
			ridCap, own = ownRIDCap(q.id, len(in.rooms)), true
		}
	}
	buf.B = slices.Grow(buf.B[:0], ridCap+legs*(injectedCap(q.body, &in)+ridCap))
	ridItems := 0
	if !own && ridCap > 0 && q.abortsSent == nil && r.cfg().Retry.MaxAttempts > 1 {
		q.abortsSent = new(sync.WaitGroup)
	}
	if own {
		buf.B = appendOwnRID(buf.B, q.id, in.rooms, in.batch)
		in.rid = buf.B[:len(buf.B):len(buf.B)]
	} else if ridCap > 0 {
		buf.B = append(buf.B, q.body[req.rid.start:req.rid.end]...)
		if in.batch && buf.B[0] == '"' {
			ridItems = req.batch // the engine names item i "<rid>_<i>"
		}
	}
	rid := buf.B[:len(buf.B):len(buf.B)]
	pStart := len(buf.B)
	buf.B = appendInjected(buf.B, q.body, req, pIn)
	pEnd := len(buf.B)
	if legs == 2 {
		buf.B = appendInjected(buf.B, q.body, req, dIn)
	}
	pBody, dBody := buf.B[pStart:pEnd], buf.B[pEnd:]
	if len(dBody) == 0 {
		dBody = pBody
	}
	x := proxy.Exchange{
		Prefill: pt, Decode: dt, Path: q.route,
		PrefillBody: pBody, DecodeBody: dBody, Buffer: buf,
		Stream: req.stream, MergeLogprobs: req.returnLogprob && q.route == "/generate",
		RequestID: q.id, Deadline: q.deadline, ClientConn: q.conn,
		RID: rid, RIDItems: ridItems, AbortsSent: q.abortsSent, Resumable: q.resumable,
	}
	traced := q.traceLegs(&x, p, d, ranks, in.rooms)
	ans, uerr := r.proxy.Do(&x)
	if traced != nil {
		bytebufferpool.Put(traced) // Do copied the head lines
	}
	return ans, uerr, refusal{}
}

// answer writes a committed non-streamed answer into q.resp (and returns
// nil), or returns a committed stream for the caller to relay.
func (q *request) answer(ans *proxy.Answer) *proxy.Stream {
	q.status = ans.Status
	if q.migrations > 0 {
		return ans.Stream // a continuation: the client had its first byte long ago
	}
	ttft := q.r.clock.Now().Sub(q.start)
	q.r.metrics.TTFT(q.route, ttft)
	q.trace.ttft = ttft
	if ans.Stream != nil {
		return ans.Stream
	}
	q.resp.SetStatusCode(ans.Status)
	q.resp.Header.SetContentTypeBytes(ans.ContentType)
	q.resp.SetBody(ans.Body)
	q.bytes = len(ans.Body)
	ans.Release()
	return nil
}
