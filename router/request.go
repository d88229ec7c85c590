package router

import (
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/bytebufferpool"
	"github.com/valyala/fasthttp"

	"pdlb"
	"pdlb/proxy"
	"pdlb/router/policy"
)

// request is one fan-out request from arrival to its one log line. The
// goroutine that owns it (the fasthttp handler, or a stream's own
// goroutine) defers finish, which logs, records the metrics and gives the
// admission slot and the client connection back exactly once.
type request struct {
	r     *Router
	route string
	id    string
	// body is the client's body; for a stream it lives in own, copied out
	// of fasthttp's recycled request context.
	body     []byte
	own      *bytebufferpool.ByteBuffer
	parsed   pdRequest
	start    time.Time
	deadline time.Time
	// conn is the client connection, watched for a disconnect while the
	// backends work; a stream's is hijacked and closed by finish.
	conn     net.Conn
	hijacked bool
	// resp receives the answer or the error (a stream's error answer is
	// written on conn by finish's caller).
	resp    *fasthttp.Response
	release func() // the admission slot; nil until admitted
	// key is the routing key (policy.Request.Key), read only while a keyed
	// policy is in force; it points into the request context, so a stream
	// holds a copy.
	key string

	// failedPairs are the pairs whose pairing failed an attempt of this
	// request (a pair fault): later attempts avoid them.
	failedPairs []Pair

	// What the log line says.
	prefill, decode             string
	prefillReason, decodeReason policy.Reason
	room                        uint64
	attempts                    int
	// resumable marks a stream that migrates when its decode breaks
	// mid-way (migrate.go); migrations counts how often it did.
	resumable  bool
	migrations int
	// origParsed is parsed of the client's body (still in own) once a
	// continuation's body has replaced body and parsed.
	origParsed    pdRequest
	status        int
	bytes, events int
	err           error

	// trace is the request's tracing; its zero value is tracing off.
	trace requestTrace
	// abortsSent, set when the client named the rid and a retry may reuse
	// it, holds each attempt until its aborts are sent (pd.go).
	abortsSent *sync.WaitGroup
}

func (r *Router) newRequest(ctx *fasthttp.RequestCtx, route string) request {
	now := r.clock.Now()
	q := request{r: r, route: route, id: requestID(ctx), start: now, conn: ctx.Conn(), resp: &ctx.Response, body: ctx.PostBody()}
	q.deadline = now.Add(r.cfg().Timeout.Request)
	if h := r.policies.Load().keyHeader; h != "" {
		q.key = b2s(ctx.Request.Header.Peek(h))
	}
	ctx.Response.Header.Set(proxy.HeaderRequestID, q.id)
	return q
}

// admit takes an admission slot, or answers 429/503 and returns false.
func (q *request) admit(ctx *fasthttp.RequestCtx) bool {
	release, status, err, queued := q.r.admission.acquire(ctx)
	if queued {
		q.traceAdmission(err)
	}
	if err == nil {
		q.release = release
		return true
	}
	q.r.metrics.Counter(`pdlb_admission_refused_total{status="` + strconv.Itoa(status) + `"}`).Inc()
	if status == fasthttp.StatusTooManyRequests {
		q.fail(status, pdlb.ErrRateLimited, "too many requests: "+err.Error(), err)
		q.resp.Header.Set(fasthttp.HeaderRetryAfter, "1")
	} else {
		q.unavailable(1, "no capacity: "+err.Error())
	}
	return false
}

// parse reads what routing needs from the body, or answers 400.
func (q *request) parse(batchAware bool) bool {
	p, err := parseRequest(q.body, parseOptions{generate: batchAware, maxBatch: q.r.cfg().Limits.MaxBatchSize})
	if err != nil {
		q.fail(fasthttp.StatusBadRequest, pdlb.ErrInvalidRequest, err.Error(), err)
		return false
	}
	q.parsed = p
	return true
}

// fail answers with pdlb's error shape and records why for the log line.
func (q *request) fail(status int, typ, msg string, cause error) {
	pdlb.SetError(q.resp, status, typ, msg)
	q.status, q.err = status, cause
}

// unavailable answers 503 with Retry-After: capacity may come back.
func (q *request) unavailable(retryAfter int, msg string) {
	pdlb.SetUnavailable(q.resp, retryAfter, msg)
	q.status, q.err = fasthttp.StatusServiceUnavailable, errors.New(msg)
}

// finish ends the request: its metrics, its log line, its admission slot
// and, for a stream, its hijacked connection.
func (q *request) finish() {
	q.finishTrace()
	elapsed := q.r.clock.Now().Sub(q.start)
	q.r.metrics.Request(q.route, q.status, elapsed)
	q.log(elapsed)
	if q.release != nil {
		q.release()
		q.release = nil
	}
	if q.own != nil {
		bytebufferpool.Put(q.own)
		q.own, q.body = nil, nil
	}
	if q.hijacked {
		q.conn.Close()
		q.r.activeStreams.Add(-1)
		q.r.streams.Done()
	}
}

// log writes the request's one line: info, or warn for 5xx, a client that
// left (499) and a stream that broke after its 200.
// A failure logged at warn is also kept for the status page.
func (q *request) log(elapsed time.Duration) {
	warn := q.status >= 500 || q.status == statusClientGone || q.err != nil && q.status < 400
	var ev *zerolog.Event
	if warn {
		ev = q.r.log.Warn()
		q.r.errors.add(RecentError{Time: q.start.Add(elapsed), RequestID: q.id, Route: q.route, Status: q.status,
			Cause: q.err, Prefill: q.prefill, Decode: q.decode})
	} else {
		ev = q.r.log.Info()
	}
	if !ev.Enabled() {
		return
	}
	ev = ev.Str("method", "POST").Str("path", q.route).Int("status", q.status).
		Str("request_id", q.id).Str("prefill", q.prefill).Str("decode", q.decode).
		Uint64("room", q.room).Int("attempts", q.attempts).Dur("duration", elapsed).
		Int("bytes", q.bytes)
	if q.events > 0 {
		ev = ev.Int("events", q.events)
	}
	for _, why := range [2]policy.Reason{q.prefillReason, q.decodeReason} {
		if why.Key != "" {
			ev = ev.Float64(why.Key, why.Value)
		}
	}
	if q.err != nil {
		ev = ev.Err(q.err)
	}
	ev.Msg("request")
}

// policyRequest is what the selection policies see of the request.
func (q *request) policyRequest() policy.Request {
	pr := policy.Request{Key: q.key}
	if sp := q.parsed.prompt; sp.end > sp.start {
		pr.Prompt = q.body[sp.start:sp.end]
	}
	return pr
}

// statusClientGone is what the log and metrics record for a request whose
// client disconnected before its answer (nginx's convention).
const statusClientGone = 499

// requestID takes the client's X-Request-ID or makes one. The client's is
// kept only when it is up to 128 visible ASCII characters: it is copied
// verbatim into both engine requests' heads.
func requestID(ctx *fasthttp.RequestCtx) string {
	if id := ctx.Request.Header.Peek(proxy.HeaderRequestID); len(id) > 0 && len(id) <= 128 && visibleASCII(id) {
		return string(id)
	}
	var raw [8]byte
	v := rand.Uint64()
	for i := range raw {
		raw[i] = byte(v >> (8 * i))
	}
	return "req-" + hex.EncodeToString(raw[:])
}

func visibleASCII(b []byte) bool {
	for _, c := range b {
		if c <= ' ' || c > '~' {
			return false
		}
	}
	return true
}
