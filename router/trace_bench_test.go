package router

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/bytebufferpool"
	"github.com/valyala/fasthttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"pdlb"
	"pdlb/proxy"
	"pdlb/proxy/proxytest"
)

// BenchmarkRequestTracing runs a whole non-streamed /generate through the
// Router's handler against loopback engines, with tracing off, on with
// sampling ratio 0.01 (what production would run) and on with every request
// sampled. allocs/op counts the whole process: pdlb, the in-process engines
// and the span processor, which here drops the spans (no exporter), so the
// figures are what a span costs to build and end.
//
//	go test ./router -run '^$' -bench RequestTracing -benchmem -count 5
func BenchmarkRequestTracing(b *testing.B) {
	p, d := benchEngines(b)
	for _, tc := range []struct {
		name  string
		ratio float64 // < 0: tracing off
	}{{"off", -1}, {"ratio-0.01", 0.01}, {"ratio-1", 1}} {
		b.Run(tc.name, func(b *testing.B) {
			var tracer trace.Tracer
			if tc.ratio >= 0 {
				tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(tc.ratio))),
					sdktrace.WithSpanProcessor(discardSpans{}))
				b.Cleanup(func() { tp.Shutdown(context.Background()) })
				tracer = tp.Tracer("pdlb")
			}
			l := startLBFull(b, []*proxytest.Engine{p}, []*proxytest.Engine{d}, Options{Log: zerolog.Nop(), Tracer: tracer})
			benchGenerate(b, l, `{"text":"The quick brown fox jumps over the lazy dog","sampling_params":{"max_new_tokens":16}}`)
		})
	}
}

// benchEngines are a prefill and a decode that answer at once.
func benchEngines(b *testing.B) (p, d *proxytest.Engine) {
	p = proxytest.NewEngine(b, proxytest.JSONAnswer(200, `{"text":"","meta_info":{}}`))
	d = proxytest.NewEngine(b, proxytest.JSONAnswer(200, `{"text":"hello","meta_info":{"completion_tokens":1}}`))
	return p, d
}

// benchGenerate runs b.N non-streamed /generate requests with body through
// l's handler (no client connection), each of them expected to be a 200.
func benchGenerate(b *testing.B, l *lb, body string) {
	var req fasthttp.Request
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI("/generate")
	req.Header.SetContentType("application/json")
	req.SetBodyString(body)
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}, nil)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		ctx.Response.Reset()
		l.router.Handler(&ctx)
		if ctx.Response.StatusCode() != 200 {
			b.Fatalf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
}

// discardSpans ends spans nowhere: the benchmark measures pdlb's side.
type discardSpans struct{}

func (discardSpans) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (discardSpans) OnEnd(sdktrace.ReadOnlySpan)                     {}
func (discardSpans) Shutdown(context.Context) error                  { return nil }
func (discardSpans) ForceFlush(context.Context) error                { return nil }

// BenchmarkTraceWork is the tracing work of one request alone, without
// the request: server span, attempt, leg head lines, the end. A request
// sampled out (ratio-0.01 at 99 % of requests) pays "unsampled"; with a
// client traceparent it also parses that header.
//
//	go test ./router -run '^$' -bench TraceWork -benchmem -count 5
func BenchmarkTraceWork(b *testing.B) {
	p, err := proxy.NewBackend("http://127.0.0.1:30000", proxy.Prefill, time.Second)
	if err != nil {
		b.Fatal(err)
	}
	d, _ := proxy.NewBackend("http://127.0.0.1:30001", proxy.Decode, time.Second)
	rooms := []uint64{7}
	for _, tc := range []struct {
		name, traceparent string
		ratio             float64 // < 0: tracing off
	}{
		{"off", "", -1},
		{"unsampled", "", 0},
		{"unsampled-client-traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", 0},
		{"sampled", "", 1},
	} {
		b.Run(tc.name, func(b *testing.B) {
			r := &Router{clock: pdlb.Clock{}.OrSystem()}
			r.settings.Store(newLiveSettings(Settings{}))
			if tc.ratio >= 0 {
				tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(tc.ratio))),
					sdktrace.WithSpanProcessor(discardSpans{}))
				b.Cleanup(func() { tp.Shutdown(context.Background()) })
				r.tracer = tp.Tracer("pdlb")
			}
			var ctx fasthttp.RequestCtx
			if tc.traceparent != "" {
				ctx.Request.Header.Set("traceparent", tc.traceparent)
			}
			b.ReportAllocs()
			for b.Loop() {
				q := request{r: r, route: "/generate", id: "req-1", status: 200}
				if r.tracer != nil {
					q.startTrace(&ctx, "POST /generate")
				}
				q.startAttemptSpan(1, nil)
				var x proxy.Exchange
				if buf := q.traceLegs(&x, p, d, dpRanks{-1, -1}, rooms); buf != nil {
					if x.Tracer != nil {
						x.Tracer.LegDone(proxy.LegReport{Role: proxy.Prefill, Status: 200})
						x.Tracer.LegDone(proxy.LegReport{Role: proxy.Decode, Status: 200})
					}
					bytebufferpool.Put(buf)
				}
				q.endAttemptSpan(nil, refusal{})
				q.finishTrace()
			}
		})
	}
}
