package mock

import (
	"time"

	"github.com/valyala/fasthttp"
)

// The steps every generation request goes through, whatever its route:
// start-up gate, bootstrap check, hook, fault draw, batch slot, stall,
// prefill time. The route files only shape answers.

// gate answers 503 while SlowStart holds the engine back (true: answered).
func (e *Engine) gate(ctx *fasthttp.RequestCtx, path string) bool {
	if !e.starting() {
		return false
	}
	ctx.Response.Header.Set("Retry-After", "1")
	if path == pathGenerate {
		writeJSON(ctx, fasthttp.StatusServiceUnavailable, nativeError("mock engine is starting", "service_unavailable", 503))
	} else {
		writeJSON(ctx, fasthttp.StatusServiceUnavailable, openAIError("mock engine is starting", "ServiceUnavailable", 503))
	}
	return true
}

// reject answers an HTTP error in the route's error shape.
func (e *Engine) reject(ctx *fasthttp.RequestCtx, r *Request, code int, msg string) {
	if r.Path == pathGenerate {
		writeJSON(ctx, code, nativeError(msg, errorType(code), code))
		return
	}
	writeJSON(ctx, code, openAIError(msg, openAIErrorType(code), code))
}

// rejectInStream answers the way SGLang does when a streaming request fails
// validation inside the engine: 200, one error event, then [DONE].
func rejectInStream(ctx *fasthttp.RequestCtx, code int, msg string) {
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType("text/event-stream")
	b := append([]byte("data: "), streamError(msg, errorType(code), code)...)
	b = append(b, "\n\n"...)
	b = append(b, doneEvent...)
	ctx.SetBody(b)
}

func errorType(code int) string {
	if code >= 400 && code < 500 {
		return "invalid_request_error"
	}
	return "internal_error"
}

func openAIErrorType(code int) string {
	if code >= 400 && code < 500 {
		return "BadRequestError"
	}
	return "InternalServerError"
}

// admitted is a request that passed admission and holds a batch slot.
type admitted struct {
	r      *Request
	fault  fault
	abort  chan struct{}
	timer  *time.Timer
	tokens int64 // what it counts for in the batch's load figures
}

// admit runs the common steps. It returns nil when it has already answered.
// On success the caller owns a batch slot and must call e.finish. A prefill
// tells the decodes waiting for its rooms (KVTransfers) how it went.
func (e *Engine) admit(ctx *fasthttp.RequestCtx, r *Request) *admitted {
	a := e.admitSteps(ctx, r)
	if e.opts.Role == RolePrefill && r.hasRoom {
		if a != nil {
			e.handOver(r, "")
		} else {
			e.handOver(r, "did not compute it")
		}
	}
	return a
}

// admitSteps is admit without the hand-over: room check, bootstrap, hook,
// fault draw, the decode's wait for its KV, a batch slot, stall, the
// prefill's computation.
func (e *Engine) admitSteps(ctx *fasthttp.RequestCtx, r *Request) *admitted {
	if r.Rid == "" {
		r.Rid = e.newID()
	}
	if !r.hasRoom {
		msg := missingRoomMessage(r.Rid)
		if r.Stream {
			rejectInStream(ctx, fasthttp.StatusBadRequest, msg)
		} else {
			e.reject(ctx, r, fasthttp.StatusBadRequest, msg)
		}
		return nil
	}
	if err := e.kvBootstrap(e.ctx, r); err != nil {
		code, msg := statusOf(err)
		e.reject(ctx, r, code, msg)
		return nil
	}
	if e.opts.BeforeAnswer != nil {
		if err := e.opts.BeforeAnswer(e.ctx, r); err != nil {
			code, msg := statusOf(err)
			e.reject(ctx, r, code, msg)
			return nil
		}
	}
	r.Body = nil
	a := &admitted{r: r, fault: e.drawFault(), abort: e.watchAbort(r.abortRids())}
	if a.fault == faultError {
		e.stats.injected.Add(1)
		e.unwatchAbort(r.abortRids(), a.abort)
		e.reject(ctx, r, e.opts.ErrorStatus, "mock: injected error")
		return nil
	}
	a.timer = time.NewTimer(time.Hour)
	a.timer.Stop()
	prefill := e.opts.Role == RolePrefill
	if prefill {
		e.observe(r)
	} else if err := e.awaitKV(a); err != nil {
		e.unwatchAbort(r.abortRids(), a.abort)
		code, msg := statusOf(err)
		e.reject(ctx, r, code, msg)
		return nil
	}
	a.tokens = int64(r.itemTokens())
	if !prefill {
		a.tokens += int64(r.MaxTokens * r.Items)
	}
	if !e.sched.acquire(e.stopping(), a.abort, a.tokens) {
		e.unwatchAbort(r.abortRids(), a.abort)
		e.reject(ctx, r, fasthttp.StatusServiceUnavailable, "mock: request dropped while queued")
		return nil
	}
	if a.fault == faultStall {
		e.stats.stalls.Add(1)
		waitClientGone(ctx.Conn(), e.stopping(), a.abort, maxStall)
		e.finish(a)
		ctx.SetConnectionClose()
		e.reject(ctx, r, fasthttp.StatusServiceUnavailable, "mock: stalled request released")
		return nil
	}
	if prefill && !e.prefill(a) {
		e.finish(a)
		e.reject(ctx, r, fasthttp.StatusServiceUnavailable, "mock: request aborted")
		return nil
	}
	return a
}

// finish releases what admit took.
func (e *Engine) finish(a *admitted) {
	e.sched.release(a.tokens)
	e.unwatchAbort(a.r.abortRids(), a.abort)
}

// abortRids are the rids /abort_request may name to end r.
func (r *Request) abortRids() []string {
	if len(r.ItemRids) > 0 {
		return r.ItemRids
	}
	return []string{r.Rid}
}

// watchAbort registers rids so /abort_request can end the request. The
// mock answers a batch as one piece of work: aborting any of its items
// ends all of them (SGLang ends just that item).
func (e *Engine) watchAbort(rids []string) chan struct{} {
	ch := make(chan struct{})
	e.abortMu.Lock()
	for _, rid := range rids {
		e.aborts[rid] = ch
	}
	e.abortMu.Unlock()
	return ch
}

// unwatchAbort forgets rids unless another request has taken them over since.
func (e *Engine) unwatchAbort(rids []string, ch chan struct{}) {
	e.abortMu.Lock()
	for _, rid := range rids {
		if e.aborts[rid] == ch {
			delete(e.aborts, rid)
		}
	}
	e.abortMu.Unlock()
}

// abortRid ends the in-flight request with that rid, if any.
func (e *Engine) abortRid(rid string) {
	e.abortMu.Lock()
	defer e.abortMu.Unlock()
	ch, ok := e.aborts[rid]
	delete(e.aborts, rid)
	if !ok {
		return
	}
	select {
	case <-ch: // another item of the batch was aborted first
	default:
		close(ch)
	}
}

// decodeNonStream plays the decode time of a non-streamed answer, or the
// injected death; false means the answer is already settled (connection
// killed, or the request aborted).
func (e *Engine) decodeNonStream(ctx *fasthttp.RequestCtx, a *admitted, r *Request) bool {
	if a.fault == faultDie {
		e.kill(ctx.Conn())
		return false
	}
	if !e.decode(a, r.MaxTokens) {
		e.reject(ctx, r, fasthttp.StatusServiceUnavailable, "mock: request aborted")
		return false
	}
	return true
}
