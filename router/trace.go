package router

import (
	"context"
	"encoding/hex"
	"errors"
	"strconv"
	"time"

	"github.com/valyala/bytebufferpool"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"pdlb/proxy"
	"pdlb/router/policy"
)

// A traced request is one server span; under it, an "admission" span when
// the request waited in the admission queue, one span per attempt, and
// under each attempt that reached the engines a span per leg, whose
// traceparent goes to that leg's engine.
//
// Tracing off (Router.tracer nil), a request does nothing here but test
// that one pointer. Tracing on, a request the sampler leaves out gets a
// non-recording server span and nothing else: no child spans and no
// attributes (every step checks IsRecording first); its legs still carry
// its traceparent, with the sampled flag off, so the engines follow the
// decision.

// pdlb's own span attributes; semconv's where one exists.
const (
	attrRequestID   = attribute.Key("pdlb.request_id")
	attrRole        = attribute.Key("pdlb.role")
	attrRoom        = attribute.Key("pdlb.bootstrap_room")
	attrBatch       = attribute.Key("pdlb.batch_size")
	attrDPRank      = attribute.Key("pdlb.dp_rank")
	attrPolicy      = attribute.Key("pdlb.policy")
	attrReason      = attribute.Key("pdlb.policy.reason")
	attrReasonValue = attribute.Key("pdlb.policy.value")
	attrAttempt     = attribute.Key("pdlb.attempt")
	attrAttempts    = attribute.Key("pdlb.attempts")
	attrRetryReason = attribute.Key("pdlb.retry_reason")
	attrEvents      = attribute.Key("pdlb.events")
	attrTTFT        = attribute.Key("pdlb.ttft_ms")
	attrFirstByte   = attribute.Key("pdlb.first_byte_ms")
	attrPrefill     = attribute.Key("pdlb.prefill")
	attrDecode      = attribute.Key("pdlb.decode")
	attrQueued      = attribute.Key("pdlb.queue_wait_ms")
)

// requestTrace is one request's tracing state. Its zero value is tracing
// off.
type requestTrace struct {
	// ctx carries the server span, parent of the attempts; nil when off.
	ctx  context.Context
	span trace.Span
	// attempt is the span of the attempt in progress or, once an attempt
	// committed a stream, of that attempt until the request finishes (it
	// holds the decode leg, which lasts as long as the stream).
	attempt trace.Span
	// ttft is the request's time to its first byte, once known.
	ttft time.Duration
}

// recording says whether this request's spans record anything.
func (t *requestTrace) recording() bool { return t.span != nil && t.span.IsRecording() }

// headerCarrier reads a client's trace headers for the W3C propagator.
// Values are copied: tracestate is kept by the span context, and the
// request context is recycled.
type headerCarrier struct{ h *fasthttp.RequestHeader }

func (c headerCarrier) Get(key string) string {
	if v := c.h.Peek(key); len(v) > 0 {
		return string(v)
	}
	return ""
}

func (headerCarrier) Set(string, string) {}

func (headerCarrier) Keys() []string { return nil }

// Span options made once: built per call, they cost every request,
// sampled or not, an allocation each.
var (
	serverSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}
	clientSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}
)

// startTrace continues the client's trace (W3C traceparent/tracestate) or
// starts one, with the request's server span.
func (q *request) startTrace(ctx *fasthttp.RequestCtx, name string) {
	parent := propagation.TraceContext{}.Extract(context.Background(), headerCarrier{&ctx.Request.Header})
	t := &q.trace
	t.ctx, t.span = q.r.tracer.Start(parent, name, serverSpan...)
	if t.span.IsRecording() {
		t.span.SetAttributes(semconv.HTTPRequestMethodPost, semconv.HTTPRoute(q.route), semconv.URLPath(q.route), attrRequestID.String(q.id))
	}
}

// traceAdmission records the wait of a request that was queued for an
// admission slot (one that got its slot at once has nothing to show).
func (q *request) traceAdmission(err error) {
	if !q.trace.recording() {
		return
	}
	now := q.r.clock.Now()
	_, span := q.r.tracer.Start(q.trace.ctx, "admission", trace.WithTimestamp(q.start))
	span.SetAttributes(attrQueued.Float64(ms(now.Sub(q.start))))
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End(trace.WithTimestamp(now))
}

// startAttemptSpan opens attempt n's span; prev is why the last attempt
// failed (nil for the first).
func (q *request) startAttemptSpan(n int, prev *proxy.UpstreamError) {
	if !q.trace.recording() {
		return
	}
	_, span := q.r.tracer.Start(q.trace.ctx, "attempt")
	span.SetAttributes(attrAttempt.Int(n))
	if prev != nil {
		span.SetAttributes(attrRetryReason.String(retryReason(prev)))
	}
	q.trace.attempt = span
}

// endAttemptSpan closes the attempt span with how the attempt ended: an
// upstream failure, a refusal before any backend was contacted, or (both
// nil) an answer.
func (q *request) endAttemptSpan(uerr *proxy.UpstreamError, ref refusal) {
	span := q.trace.attempt
	if span == nil {
		return
	}
	q.trace.attempt = nil
	switch {
	case uerr != nil:
		span.SetStatus(codes.Error, uerr.Error())
	case ref.status != 0:
		span.SetAttributes(semconv.HTTPResponseStatusCode(ref.status))
		span.SetStatus(codes.Error, ref.msg)
	}
	span.End()
}

// retryReason says briefly why an attempt is retried: the failing leg and
// how it failed ("decode 503", "prefill connect").
func retryReason(e *proxy.UpstreamError) string {
	if e.Kind == proxy.KindStatus {
		return e.Backend.Role.String() + " " + strconv.Itoa(e.Status)
	}
	return e.Backend.Role.String() + " " + e.Kind.String()
}

// traceLegs opens the spans of an attempt's two legs and puts their
// traceparent (the server span's, unsampled, when not recording) into the
// exchange. The returned buffer holds those head lines; give it back once
// Do has returned (Do copies them).
func (q *request) traceLegs(x *proxy.Exchange, p, d *proxy.Backend, ranks dpRanks, rooms []uint64) *bytebufferpool.ByteBuffer {
	if q.trace.span == nil {
		return nil
	}
	buf := bytebufferpool.Get()
	if q.trace.attempt == nil { // not recording: the engines get the decision
		buf.B = appendTraceHead(buf.B[:0], q.trace.span.SpanContext())
		x.PrefillTrace, x.DecodeTrace = buf.B, buf.B
		return buf
	}
	actx := trace.ContextWithSpan(q.trace.ctx, q.trace.attempt)
	pol := q.r.cfg().Policy
	q.trace.attempt.SetAttributes(attrPrefill.String(p.URL), attrDecode.String(d.URL), attrRoom.Int64(int64(rooms[0])))
	legs := &legSpans{start: q.r.clock.Now()}
	legs.prefill = q.startLeg(actx, p, pol.Prefill, q.prefillReason, ranks.prefill, rooms)
	legs.decode = q.startLeg(actx, d, pol.Decode, q.decodeReason, ranks.decode, rooms)
	buf.B = appendTraceHead(buf.B[:0], legs.prefill.SpanContext())
	pEnd := len(buf.B)
	buf.B = appendTraceHead(buf.B, legs.decode.SpanContext())
	x.PrefillTrace, x.DecodeTrace = buf.B[:pEnd], buf.B[pEnd:]
	x.Tracer = legs
	return buf
}

func (q *request) startLeg(parent context.Context, b *proxy.Backend, policyName string, why policy.Reason, rank int, rooms []uint64) trace.Span {
	name := b.Role.String() + " POST " + q.route
	_, span := q.r.tracer.Start(parent, name, clientSpan...)
	span.SetAttributes(semconv.HTTPRequestMethodPost, semconv.URLFull(b.URL+q.route), semconv.ServerAddress(b.Host),
		attrRole.String(b.Role.String()), attrRoom.Int64(int64(rooms[0])), attrPolicy.String(policyName))
	if len(rooms) > 1 || q.parsed.batch > 0 {
		span.SetAttributes(attrBatch.Int(len(rooms)))
	}
	if rank >= 0 {
		span.SetAttributes(attrDPRank.Int(rank))
	}
	if why.Key != "" {
		span.SetAttributes(attrReason.String(why.Key), attrReasonValue.Float64(why.Value))
	}
	return span
}

// legSpans are one attempt's leg spans; the proxy reports to them as each
// leg ends (from two goroutines: each touches only its own span).
type legSpans struct {
	prefill, decode trace.Span
	start           time.Time
}

var _ proxy.LegTracer = (*legSpans)(nil)

// LegDone ends a leg's span with what the leg did.
func (l *legSpans) LegDone(rep proxy.LegReport) {
	span, firstKey := l.prefill, attrFirstByte
	if rep.Role == proxy.Decode {
		span, firstKey = l.decode, attrTTFT
	}
	if rep.Status != 0 {
		span.SetAttributes(semconv.HTTPResponseStatusCode(rep.Status))
	}
	span.SetAttributes(semconv.HTTPResponseBodySize(rep.Bytes))
	if rep.Events > 0 {
		span.SetAttributes(attrEvents.Int(rep.Events))
	}
	if !rep.FirstByte.IsZero() {
		span.SetAttributes(firstKey.Float64(ms(rep.FirstByte.Sub(l.start))))
	}
	if rep.Err != nil {
		span.SetStatus(codes.Error, rep.Err.Error())
	}
	span.End(trace.WithTimestamp(rep.End))
}

// finishTrace ends the request's spans with how it ended: the attempt span
// of a committed stream, then the server span.
func (q *request) finishTrace() {
	t := &q.trace
	if t.span == nil {
		return
	}
	if t.attempt != nil {
		var uerr *proxy.UpstreamError
		if errors.As(q.err, &uerr) && q.status < 400 {
			t.attempt.SetStatus(codes.Error, uerr.Error()) // the stream broke after its 200
		}
		t.attempt.End()
		t.attempt = nil
	}
	if !t.span.IsRecording() {
		return
	}
	span := t.span
	span.SetAttributes(semconv.HTTPResponseStatusCode(q.status), attrAttempts.Int(q.attempts), semconv.HTTPResponseBodySize(q.bytes))
	if q.prefill != "" {
		span.SetAttributes(attrPrefill.String(q.prefill), attrDecode.String(q.decode), attrRoom.Int64(int64(q.room)))
	}
	if q.events > 0 {
		span.SetAttributes(attrEvents.Int(q.events))
	}
	if t.ttft > 0 {
		span.SetAttributes(attrTTFT.Float64(ms(t.ttft)))
	}
	// A 4xx is the client's answer, not a fault of the server (semantic
	// conventions for server spans); a client that left and a stream that
	// broke after its 200 are.
	if q.status >= 500 || q.status == statusClientGone || (q.err != nil && q.status < 400) {
		msg := strconv.Itoa(q.status)
		if q.err != nil {
			msg = q.err.Error()
		}
		span.SetStatus(codes.Error, msg)
	}
	span.End()
}

// appendTraceHead renders a span context as the W3C head lines an engine
// reads (the TraceContext propagator's format; TestTraceHeadMatchesPropagator),
// straight into the head buffer rather than through a map of strings.
func appendTraceHead(dst []byte, sc trace.SpanContext) []byte {
	tid, sid := sc.TraceID(), sc.SpanID()
	dst = append(dst, "traceparent: 00-"...)
	dst = hex.AppendEncode(dst, tid[:])
	dst = append(dst, '-')
	dst = hex.AppendEncode(dst, sid[:])
	dst = append(dst, '-')
	flags := [1]byte{byte(sc.TraceFlags() & (trace.FlagsSampled | trace.FlagsRandom))}
	dst = hex.AppendEncode(dst, flags[:])
	dst = append(dst, "\r\n"...)
	if ts := sc.TraceState(); ts.Len() > 0 {
		dst = append(dst, "tracestate: "...)
		dst = append(dst, ts.String()...)
		dst = append(dst, "\r\n"...)
	}
	return dst
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
