package mock

import (
	"bufio"
	"time"

	"github.com/valyala/fasthttp"
)

// SSE framing exactly as SGLang writes it: b"data: " + json + b"\n\n" per
// event, then b"data: [DONE]\n\n".

const doneEvent = "data: [DONE]\n\n"

// finishKind is how an event ends its item.
type finishKind uint8

const (
	finishNone   finishKind = iota // more tokens follow
	finishLength                   // max tokens reached
	finishAbort                    // /abort_request or shutdown
)

// eventFunc appends step's framed event(s) to b: step k carries k+1 tokens
// (or 0 when the stream has no token), finish says whether it is the last.
type eventFunc func(b []byte, step int, finish finishKind) []byte

// dieGrace is how long a dying stream waits before closing its connection:
// fasthttp relays the stream writer's output through a pipe, so events just
// flushed may not have reached the socket yet.
const dieGrace = 20 * time.Millisecond

// stream answers a with steps stream steps, pausing the token gap between
// them. It owns a from here on (it calls e.finish). A failed flush means the
// client left: the stream stops there.
func (e *Engine) stream(ctx *fasthttp.RequestCtx, a *admitted, steps int, event eventFunc) {
	conn := ctx.Conn()
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType("text/event-stream")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	stop := e.stopping()
	e.stats.streams.Add(1)
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		defer e.stats.streams.Add(-1)
		released := false
		release := func() {
			if !released {
				released = true
				e.finish(a)
			}
		}
		defer release()
		dieAt, stall := -1, false
		if a.fault == faultDie {
			dieAt = max(1, steps/2)
		} else if k, s := e.dieAfter(); k >= 0 {
			dieAt, stall = min(k, steps), s
		}
		buf := make([]byte, 0, 1024)
		for k := 0; k < steps; k++ {
			if k == dieAt {
				if stall {
					e.stats.stalls.Add(1)
					waitClientGone(conn, stop, a.abort, maxStall)
					return
				}
				time.Sleep(dieGrace)
				e.kill(conn)
				return
			}
			// The gap follows the batch as it changes during the stream.
			if k > 0 && !wait(a.timer, e.tokenGap(), stop, a.abort) {
				buf = event(buf[:0], k, finishAbort)
				buf = append(buf, doneEvent...)
				_, _ = w.Write(buf)
				_ = w.Flush()
				return
			}
			finish := finishNone
			if k == steps-1 {
				finish = finishLength
			}
			buf = event(buf[:0], k, finish)
			if _, err := w.Write(buf); err != nil {
				return
			}
			if err := w.Flush(); err != nil {
				return
			}
		}
		if dieAt == steps && stall {
			e.stats.stalls.Add(1)
			waitClientGone(conn, stop, a.abort, maxStall)
			return
		}
		if dieAt == steps {
			time.Sleep(dieGrace)
			e.kill(conn)
			return
		}
		if _, err := w.WriteString(doneEvent); err != nil {
			return
		}
		if err := w.Flush(); err != nil {
			return
		}
		release()
		if e.opts.KeepOpenAfterDone {
			waitClientGone(conn, stop, nil, maxKeepOpen)
		}
	})
}
