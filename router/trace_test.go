package router

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"pdlb/config"
	"pdlb/proxy/proxytest"
)

// tracedLB is a Router tracing into an in-memory recorder, sampling ratio
// of the traces it starts.
func tracedLB(t *testing.T, ratio float64, prefills, decodes []*proxytest.Engine, opts ...lbOption) (*lb, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))), sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return startLBFull(t, prefills, decodes, Options{Log: testLog(t), Tracer: tp.Tracer("pdlb")}, opts...), rec
}

// waitSpans waits until the recorder holds n ended spans.
func waitSpans(t *testing.T, rec *tracetest.SpanRecorder, n int) []sdktrace.ReadOnlySpan {
	t.Helper()
	proxytest.WaitFor(2*time.Second, func() bool { return len(rec.Ended()) >= n })
	spans := rec.Ended()
	if len(spans) != n {
		var names []string
		for _, s := range spans {
			names = append(names, s.Name())
		}
		t.Fatalf("%d spans ended %v, want %d", len(spans), names, n)
	}
	return spans
}

func postWithTraceparent(t *testing.T, url, body, traceparent string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	if traceparent != "" {
		req.Header.Set("traceparent", traceparent)
	}
	r, err := http.DefaultClient.Do(req)
	resp, _ := proxytest.ReadAll(t, r, err)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

// TestUnsampledRequestRecordsNothingAndTellsTheEngines: a request the
// sampler leaves out ends no span, and both engines get its traceparent
// with the sampled flag off (the client's trace id when it sent one).
func TestUnsampledRequestRecordsNothingAndTellsTheEngines(t *testing.T) {
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	d := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{"text":"x"}`))
	l, rec := tracedLB(t, 0, []*proxytest.Engine{p}, []*proxytest.Engine{d})

	postWithTraceparent(t, l.URL+"/generate", `{"text":"hi"}`, "")
	postWithTraceparent(t, l.URL+"/generate", `{"text":"hi"}`, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")
	// A prefill leg runs beside its decode's and may reach its engine after
	// the client has its answer, even after the next request's.
	proxytest.WaitFor(2*time.Second, func() bool { return len(p.Traceparents()) == 2 && len(d.Traceparents()) == 2 })
	if n := len(rec.Ended()) + len(rec.Started()); n != 0 {
		t.Fatalf("%d spans recorded for unsampled requests", n)
	}
	ptp, dtp := p.Traceparents(), d.Traceparents()
	if len(ptp) != 2 || len(dtp) != 2 {
		t.Fatalf("engines got %v and %v", ptp, dtp)
	}
	slices.Sort(ptp)
	slices.Sort(dtp)
	for i, tp := range ptp {
		parts := strings.Split(tp, "-")
		if len(parts) != 4 || parts[0] != "00" || len(parts[1]) != 32 || parts[3] != "00" || tp != dtp[i] {
			t.Errorf("prefill got %q, decode %q; want one unsampled traceparent per request, the same on both legs", ptp, dtp)
		}
	}
	client := slices.IndexFunc(ptp, func(tp string) bool { return strings.HasPrefix(tp, "00-4bf92f3577b34da6a3ce929d0e0e4736-") })
	if client < 0 || strings.Contains(ptp[client], "00f067aa0ba902b7") {
		t.Errorf("engines got %q, want the client's trace id with pdlb's own span id", ptp)
	}
}

// TestSampledClientTraceIsContinued: a client's sampled traceparent is
// continued whatever the ratio; each leg's engine gets its leg's span id.
func TestSampledClientTraceIsContinued(t *testing.T) {
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	d := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{"text":"x"}`))
	l, rec := tracedLB(t, 0, []*proxytest.Engine{p}, []*proxytest.Engine{d})
	postWithTraceparent(t, l.URL+"/generate", `{"text":"hi"}`, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	spans := waitSpans(t, rec, 4)
	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byName[s.Name()] = s
		if s.SpanContext().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
			t.Errorf("%s: trace %s, want the client's", s.Name(), s.SpanContext().TraceID())
		}
	}
	server, attempt := byName["POST /generate"], byName["attempt"]
	if server == nil || attempt == nil || server.Parent().SpanID().String() != "00f067aa0ba902b7" || !server.Parent().IsRemote() {
		t.Fatalf("server span %v, want the child of the client's span", server)
	}
	if attempt.Parent().SpanID() != server.SpanContext().SpanID() {
		t.Errorf("attempt's parent %s, want the server span", attempt.Parent().SpanID())
	}
	for e, name := range map[*proxytest.Engine]string{p: "prefill POST /generate", d: "decode POST /generate"} {
		leg := byName[name]
		if leg == nil || leg.Parent().SpanID() != attempt.SpanContext().SpanID() || leg.SpanKind() != trace.SpanKindClient {
			t.Fatalf("%s: %v, want a client span under the attempt", name, leg)
		}
		want := "00-4bf92f3577b34da6a3ce929d0e0e4736-" + leg.SpanContext().SpanID().String() + "-01"
		if got := e.Traceparents(); len(got) != 1 || got[0] != want {
			t.Errorf("%s engine got %v, want %s", name, got, want)
		}
	}
}

// TestAdmissionSpanOnlyWhenQueued: the admission wait is a span only for a
// request that did wait; one admitted at once has no such span.
func TestAdmissionSpanOnlyWhenQueued(t *testing.T) {
	release := make(chan struct{})
	first := make(chan struct{}, 1)
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	d := proxytest.NewEngine(t, func(ctx *fasthttp.RequestCtx) {
		select {
		case first <- struct{}{}:
			<-release
		default:
		}
		proxytest.JSONAnswer(200, `{"text":"x"}`)(ctx)
	})
	l, rec := tracedLB(t, 1, []*proxytest.Engine{p}, []*proxytest.Engine{d}, func(c *config.Config) {
		c.Limits.MaxConcurrentRequests, c.Limits.QueueSize, c.Limits.QueueTimeout = 1, 10, 5*time.Second
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		proxytest.Post(t, l.URL+"/generate", `{"text":"one"}`)
	}()
	<-first
	go func() {
		time.Sleep(100 * time.Millisecond) // the second request is queued by now
		close(release)
	}()
	proxytest.Post(t, l.URL+"/generate", `{"text":"two"}`)
	<-done
	spans := waitSpans(t, rec, 9) // 4 per request, and one admission
	var admissions []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == "admission" {
			admissions = append(admissions, s)
		}
	}
	if len(admissions) != 1 {
		t.Fatalf("%d admission spans, want 1", len(admissions))
	}
	if wait := admissions[0].EndTime().Sub(admissions[0].StartTime()); wait < 50*time.Millisecond {
		t.Errorf("admission span lasts %s, want the queue wait (about 100ms)", wait)
	}
}

// appendTraceHead writes what the W3C propagator would.
func TestTraceHeadMatchesPropagator(t *testing.T) {
	ts, _ := trace.ParseTraceState("vendor=a,other=b")
	for _, flags := range []trace.TraceFlags{0, trace.FlagsSampled, trace.FlagsSampled | trace.FlagsRandom} {
		for _, state := range []trace.TraceState{{}, ts} {
			sc := trace.NewSpanContext(trace.SpanContextConfig{
				TraceID: trace.TraceID{0x4b, 0xf9, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 0x36}, SpanID: trace.SpanID{0, 0xf0, 1, 2, 3, 4, 5, 0xb7},
				TraceFlags: flags, TraceState: state,
			})
			carrier := propagation.MapCarrier{}
			propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), carrier)
			want := "traceparent: " + carrier["traceparent"] + "\r\n"
			if s := carrier["tracestate"]; s != "" {
				want += "tracestate: " + s + "\r\n"
			}
			if got := string(appendTraceHead(nil, sc)); got != want {
				t.Errorf("got %q, want %q", got, want)
			}
		}
	}
}
