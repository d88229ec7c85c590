package service

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"pdlb/config"
	"pdlb/proxy/proxytest"
)

// receiver is an OTLP/HTTP collector: it decodes what pdlb's exporter
// POSTs to /v1/traces, as a real collector would.
type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	spans    []*tracepb.Span
	services []string
	headers  []http.Header
}

func newReceiver(t *testing.T) *receiver {
	rc := &receiver{}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
			http.Error(w, "not an OTLP traces export", http.StatusNotFound)
			return
		}
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		raw, err := io.ReadAll(body)
		var req coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(raw, &req)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rc.mu.Lock()
		rc.headers = append(rc.headers, r.Header.Clone())
		for _, rs := range req.ResourceSpans {
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.Key == "service.name" {
					rc.services = append(rc.services, kv.GetValue().GetStringValue())
				}
			}
			for _, ss := range rs.ScopeSpans {
				rc.spans = append(rc.spans, ss.Spans...)
			}
		}
		rc.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Write(out)
	}))
	t.Cleanup(rc.Close)
	return rc
}

// trace waits for n spans of the trace id and returns them by name.
func (rc *receiver) trace(t *testing.T, traceID string, n int) map[string][]*tracepb.Span {
	t.Helper()
	var got map[string][]*tracepb.Span
	ok := proxytest.WaitFor(5*time.Second, func() bool {
		rc.mu.Lock()
		defer rc.mu.Unlock()
		got = map[string][]*tracepb.Span{}
		count := 0
		for _, s := range rc.spans {
			if hex.EncodeToString(s.TraceId) == traceID {
				got[s.Name] = append(got[s.Name], s)
				count++
			}
		}
		return count >= n
	})
	if !ok {
		t.Fatalf("trace %s: got %v, want %d spans", traceID, names(got), n)
	}
	return got
}

func names(m map[string][]*tracepb.Span) []string {
	var out []string
	for k, v := range m {
		out = append(out, fmt.Sprintf("%s×%d", k, len(v)))
	}
	return out
}

// attr finds a span attribute's value as text ("" when absent).
func attr(s *tracepb.Span, key string) string {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return anyValue(kv.Value)
		}
	}
	return ""
}

func anyValue(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonpb.AnyValue_DoubleValue:
		return fmt.Sprint(x.DoubleValue)
	case *commonpb.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	}
	return v.String()
}

func spanID(s *tracepb.Span) string   { return hex.EncodeToString(s.SpanId) }
func parentID(s *tracepb.Span) string { return hex.EncodeToString(s.ParentSpanId) }

// tracingOn points pdlb's tracing at rc, exporting every 20 ms so tests
// do not wait for the default 5 s batch delay.
func tracingOn(t *testing.T, endpoint string) lbOption {
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "20")
	return func(c *config.Config) {
		c.Tracing = config.Tracing{Enabled: true, Endpoint: endpoint, SampleRatio: 1, ServiceName: "pdlb-test",
			Headers: map[string]string{"X-Collector-Key": "k1"}}
	}
}

func postTraced(t *testing.T, url, body, traceparent string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("traceparent", traceparent)
	resp, err := http.DefaultClient.Do(req)
	return proxytest.ReadAll(t, resp, err)
}

const clientTrace = "4bf92f3577b34da6a3ce929d0e0e4736"

// TestTracingExportsTheRequestTree: a request with a client's traceparent
// reaches a real OTLP/HTTP receiver as one trace continuing the client's:
// server span → attempt → prefill and decode legs, each with its
// attributes, and each engine got its own leg's span id.
func TestTracingExportsTheRequestTree(t *testing.T) {
	rc := newReceiver(t)
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{"text":"","meta_info":{}}`))
	d := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{"text":"hello"}`))
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d}, tracingOn(t, rc.URL),
		func(c *config.Config) { c.Policy.Prefill, c.Policy.Decode = "round_robin", "random" })

	resp, body := postTraced(t, l.URL+"/generate", `{"text":"hi"}`, "00-"+clientTrace+"-00f067aa0ba902b7-01")
	if resp.StatusCode != 200 || body != `{"text":"hello"}` {
		t.Fatalf("answer %d %s", resp.StatusCode, body)
	}
	tr := rc.trace(t, clientTrace, 4)
	server, attempt := tr["POST /generate"][0], tr["attempt"][0]
	if server.Kind != tracepb.Span_SPAN_KIND_SERVER || parentID(server) != "00f067aa0ba902b7" {
		t.Errorf("server span kind %v parent %s, want a server span under the client's", server.Kind, parentID(server))
	}
	for key, want := range map[string]string{"http.request.method": "POST", "http.route": "/generate",
		"http.response.status_code": "200", "pdlb.attempts": "1", "pdlb.prefill": p.URL, "pdlb.decode": d.URL,
		"pdlb.request_id": resp.Header.Get("X-Request-ID"), "http.response.body.size": fmt.Sprint(len(body))} {
		if got := attr(server, key); got != want {
			t.Errorf("server span %s = %q, want %q", key, got, want)
		}
	}
	if attr(server, "pdlb.ttft_ms") == "" {
		t.Error("server span has no pdlb.ttft_ms")
	}
	if parentID(attempt) != spanID(server) || attr(attempt, "pdlb.attempt") != "1" || attr(attempt, "pdlb.retry_reason") != "" {
		t.Errorf("attempt span: parent %s attempt %q, want the first attempt under the server span", parentID(attempt), attr(attempt, "pdlb.attempt"))
	}
	room := gjson.GetBytes(p.LastBodyTo("/generate"), "bootstrap_room").String()
	for _, leg := range []struct {
		role, policy string
		e            *proxytest.Engine
		bytes        int
	}{{"prefill", "round_robin", p, len(`{"text":"","meta_info":{}}`)}, {"decode", "random", d, len(body)}} {
		spans := tr[leg.role+" POST /generate"]
		if len(spans) != 1 {
			t.Fatalf("%s leg spans: %d", leg.role, len(spans))
		}
		s := spans[0]
		if s.Kind != tracepb.Span_SPAN_KIND_CLIENT || parentID(s) != spanID(attempt) {
			t.Errorf("%s leg: kind %v parent %s, want a client span under the attempt", leg.role, s.Kind, parentID(s))
		}
		for key, want := range map[string]string{"pdlb.role": leg.role, "url.full": leg.e.URL + "/generate", "server.address": "127.0.0.1",
			"http.request.method": "POST", "http.response.status_code": "200", "pdlb.bootstrap_room": room,
			"pdlb.policy": leg.policy, "http.response.body.size": fmt.Sprint(leg.bytes)} {
			if got := attr(s, key); got != want {
				t.Errorf("%s leg %s = %q, want %q", leg.role, key, got, want)
			}
		}
		want := "00-" + clientTrace + "-" + spanID(s) + "-01"
		if got := leg.e.Traceparents(); len(got) != 1 || got[0] != want {
			t.Errorf("%s engine got traceparent %v, want its leg's %s", leg.role, got, want)
		}
	}
	if attr(tr["decode POST /generate"][0], "pdlb.ttft_ms") == "" || attr(tr["prefill POST /generate"][0], "pdlb.first_byte_ms") == "" {
		t.Error("legs lack their first-byte times")
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.services[0] != "pdlb-test" || rc.headers[0].Get("X-Collector-Key") != "k1" {
		t.Errorf("export: service.name %q, header %q; want tracing.service_name and tracing.headers", rc.services[0], rc.headers[0].Get("X-Collector-Key"))
	}
}

// TestTracingStream: a streamed request's decode leg and server span
// count the events relayed; the decode leg's span lasts until the stream ends.
func TestTracingStream(t *testing.T) {
	rc := newReceiver(t)
	p := proxytest.NewEngine(t, sseAnswer(`{"p":1}`))
	d := proxytest.NewEngine(t, sseAnswer(`{"text":"a"}`, `{"text":"ab"}`, `{"text":"abc"}`))
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d}, tracingOn(t, rc.URL))

	resp, body := postTraced(t, l.URL+"/generate", `{"text":"hi","stream":true}`, "00-"+clientTrace+"-00f067aa0ba902b7-01")
	if resp.StatusCode != 200 || !strings.HasSuffix(body, "data: [DONE]\n\n") {
		t.Fatalf("answer %d %q", resp.StatusCode, body)
	}
	tr := rc.trace(t, clientTrace, 4)
	server, attempt, dleg := tr["POST /generate"][0], tr["attempt"][0], tr["decode POST /generate"][0]
	if attr(dleg, "pdlb.events") != "4" || attr(server, "pdlb.events") != "4" || attr(dleg, "pdlb.ttft_ms") == "" {
		t.Errorf("events: decode leg %q, server %q (want 4: three and [DONE]); decode ttft %q",
			attr(dleg, "pdlb.events"), attr(server, "pdlb.events"), attr(dleg, "pdlb.ttft_ms"))
	}
	if attr(tr["prefill POST /generate"][0], "pdlb.events") != "2" {
		t.Errorf("prefill leg events %q, want 2", attr(tr["prefill POST /generate"][0], "pdlb.events"))
	}
	if dleg.EndTimeUnixNano > attempt.EndTimeUnixNano || attempt.EndTimeUnixNano > server.EndTimeUnixNano {
		t.Error("the stream's attempt or decode leg outlived its parent")
	}
	want := "00-" + clientTrace + "-" + spanID(dleg) + "-01"
	if got := d.Traceparents(); len(got) != 1 || got[0] != want {
		t.Errorf("decode engine got %v, want %s", got, want)
	}
}

// sseAnswer streams events then [DONE].
func sseAnswer(events ...string) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("text/event-stream")
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			for _, ev := range events {
				w.WriteString("data: " + ev + "\n\n")
				w.Flush()
			}
			w.WriteString("data: [DONE]\n\n")
			w.Flush()
		})
	}
}

// TestTracingRetry: a first pair that fails is one attempt span with the
// failure, and the retry is a second attempt span saying why it ran.
func TestTracingRetry(t *testing.T) {
	rc := newReceiver(t)
	var calls atomic.Int32
	flaky := func(ctx *fasthttp.RequestCtx) {
		if calls.Add(1) == 1 {
			proxytest.JSONAnswer(503, `{"error":"overloaded"}`)(ctx)
			return
		}
		proxytest.JSONAnswer(200, `{}`)(ctx)
	}
	p1, p2 := proxytest.NewEngine(t, flaky), proxytest.NewEngine(t, flaky)
	// The decode answers once its KV could have come: after the prefill's 503.
	d := proxytest.NewEngine(t, func(ctx *fasthttp.RequestCtx) {
		time.Sleep(100 * time.Millisecond)
		proxytest.JSONAnswer(200, `{"text":"ok"}`)(ctx)
	})
	l := startLB(t, []*proxytest.Engine{p1, p2}, []*proxytest.Engine{d}, tracingOn(t, rc.URL),
		func(c *config.Config) { c.Retry.MaxAttempts = 2 })

	if resp, body := postTraced(t, l.URL+"/generate", `{"text":"hi"}`, "00-"+clientTrace+"-00f067aa0ba902b7-01"); resp.StatusCode != 200 {
		t.Fatalf("answer %d %s", resp.StatusCode, body)
	}
	tr := rc.trace(t, clientTrace, 7) // server, 2 attempts, 4 legs
	attempts := tr["attempt"]
	if len(attempts) != 2 {
		t.Fatalf("%d attempt spans, want 2", len(attempts))
	}
	first, second := attempts[0], attempts[1]
	if attr(first, "pdlb.attempt") == "2" {
		first, second = second, first
	}
	if first.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || !strings.Contains(first.Status.GetMessage(), "answered 503") {
		t.Errorf("first attempt status %v, want the prefill's 503", first.Status)
	}
	if attr(second, "pdlb.attempt") != "2" || attr(second, "pdlb.retry_reason") != "prefill 503" || second.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("second attempt: attempt %q retry_reason %q status %v", attr(second, "pdlb.attempt"), attr(second, "pdlb.retry_reason"), second.Status)
	}
	for _, leg := range tr["prefill POST /generate"] {
		failed := parentID(leg) == spanID(first)
		if failed != (attr(leg, "http.response.status_code") == "503") || failed != (leg.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR) {
			t.Errorf("prefill leg under attempt %s: status %s, span status %v", attr(leg, "pdlb.attempt"), attr(leg, "http.response.status_code"), leg.Status)
		}
	}
	if got := attr(tr["POST /generate"][0], "pdlb.attempts"); got != "2" {
		t.Errorf("server span pdlb.attempts = %q", got)
	}
}

// TestTracingDeadCollector: a collector that refuses connections, or
// accepts them and never answers, slows no request (spans queue in bounded
// memory and are dropped), and shutdown is bounded by the flush timeout.
func TestTracingDeadCollector(t *testing.T) {
	deadURL := "http://" + proxytest.ClosedAddr(t)
	hung := make(chan struct{})
	hanging := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hung:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(hanging.Close)
	t.Cleanup(func() { close(hung) }) // before hanging.Close, which waits for its handlers

	for _, tc := range []struct{ name, url string }{{"refused", deadURL}, {"hanging", hanging.URL}} {
		t.Run(tc.name, func(t *testing.T) {
			p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
			d := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{"text":"x"}`))
			cfg := testConfig()
			cfg.Prefill = []config.Prefill{{URL: p.URL}}
			cfg.Decode = []config.Decode{{URL: d.URL}}
			tracingOn(t, tc.url)(&cfg)
			svc, err := New(&cfg, testLog(t))
			if err != nil {
				t.Fatal(err)
			}
			svc.traceFlush = 300 * time.Millisecond
			if err := svc.Start(); err != nil {
				t.Fatal(err)
			}
			url := "http://" + svc.Addr() + "/generate"
			// 800 requests × 4 spans overflow the span queue (2048) while the
			// exporter is stuck: the rest are dropped, nothing waits.
			const workers, each = 8, 100
			start := time.Now()
			var wg sync.WaitGroup
			var slowest atomic.Int64
			for range workers {
				wg.Go(func() {
					for range each {
						t0 := time.Now()
						resp, err := http.Post(url, "application/json", strings.NewReader(`{"text":"hi"}`))
						if resp, _ := proxytest.ReadAll(t, resp, err); resp.StatusCode != 200 {
							t.Errorf("status %d", resp.StatusCode)
							return
						}
						if d := int64(time.Since(t0)); d > slowest.Load() {
							slowest.Store(d)
						}
					}
				})
			}
			wg.Wait()
			took := time.Since(start)
			// A request that waited for the exporter would wait for an
			// export to time out (10 s, OTLP's default) or its retries to
			// give up. The bounds leave a loaded 2-core VM room: 800
			// requests take under 2 s idle, 15 s at a load average of 17
			// (the slowest 1.2 s).
			if took > 50*time.Second || time.Duration(slowest.Load()) > 5*time.Second {
				t.Errorf("%d requests took %s, the slowest %s: the collector slowed them", workers*each, took, time.Duration(slowest.Load()))
			}
			// Go's client may have dialled a connection it never used; pdlb's
			// server would wait for it up to server.read_timeout (5 s here),
			// which is not what this test measures.
			http.DefaultClient.CloseIdleConnections()
			t0 := time.Now()
			svc.Shutdown(context.Background())
			if d := time.Since(t0); d > 3*time.Second {
				t.Errorf("shutdown took %s with the collector %s; want about the flush timeout (300ms)", d, tc.name)
			}
		})
	}
}

// TestReloadKeepsTracing: tracing is set up at start; a reload that
// changes it says so and keeps the running values.
func TestReloadKeepsTracing(t *testing.T) {
	rc := newReceiver(t)
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	d := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	logs := &proxytest.SyncBuffer{}
	cfg := testConfig()
	cfg.Prefill = []config.Prefill{{URL: p.URL}}
	cfg.Decode = []config.Decode{{URL: d.URL}}
	tracingOn(t, rc.URL)(&cfg)
	svc := startService(t, &cfg, zerolog.New(logs))
	// One request first: it also makes sure the server is serving before the
	// test's end shuts it down (a Shutdown that overtakes Serve's start
	// leaves fasthttp's accept loop behind).
	if resp, body := postTraced(t, "http://"+svc.Addr()+"/generate", `{"text":"hi"}`, "00-"+clientTrace+"-00f067aa0ba902b7-01"); resp.StatusCode != 200 {
		t.Fatalf("answer %d %s", resp.StatusCode, body)
	}
	next := *svc.Config()
	next.Tracing.SampleRatio = 0.5
	next.Tracing.Headers = map[string]string{"X-Collector-Key": "k2"}
	if err := svc.Apply(&next); err != nil {
		t.Fatal(err)
	}
	if got := svc.Config().Tracing; got.SampleRatio != 1 || got.Headers["X-Collector-Key"] != "k1" {
		t.Errorf("tracing after reload %+v, want the running values", got)
	}
	if !strings.Contains(string(logs.Bytes()), `"keys":["tracing"]`) {
		t.Errorf("reload did not name tracing: %s", logs.Bytes())
	}
}

// The collector's address is read as OTEL_EXPORTER_OTLP_ENDPOINT is.
func TestTracesURL(t *testing.T) {
	for base, want := range map[string]string{
		"http://collector:4318":       "http://collector:4318/v1/traces",
		"http://collector:4318/":      "http://collector:4318/v1/traces",
		"https://otlp.example/otlp":   "https://otlp.example/otlp/v1/traces",
		"https://otlp.example/otlp/":  "https://otlp.example/otlp/v1/traces",
		"http://[::1]:4318":           "http://[::1]:4318/v1/traces",
		"http://user:pw@c:4318/x/y/z": "http://user:pw@c:4318/x/y/z/v1/traces",
	} {
		if got := tracesURL(base); got != want {
			t.Errorf("tracesURL(%q) = %q, want %q", base, got, want)
		}
	}
}
