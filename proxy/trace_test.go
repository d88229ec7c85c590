package proxy

import (
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"pdlb/proxy/proxytest"
)

// legReports collects an attempt's leg reports, as a traced request does.
type legReports struct {
	mu   sync.Mutex
	got  map[Role]LegReport
	seen map[Role]int
}

func (r *legReports) LegDone(rep LegReport) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.got == nil {
		r.got, r.seen = map[Role]LegReport{}, map[Role]int{}
	}
	r.got[rep.Role] = rep
	r.seen[rep.Role]++
}

// both waits for a report of each leg and fails on a leg reported twice.
func (r *legReports) both(t *testing.T) (p, d LegReport) {
	t.Helper()
	ok := proxytest.WaitFor(2*time.Second, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.got) == 2
	})
	time.Sleep(10 * time.Millisecond) // a second report would come now
	r.mu.Lock()
	defer r.mu.Unlock()
	if !ok {
		t.Fatalf("reports %+v, want one per leg", r.got)
	}
	if r.seen[Prefill] != 1 || r.seen[Decode] != 1 {
		t.Fatalf("legs reported %v times, want once each", r.seen)
	}
	return r.got[Prefill], r.got[Decode]
}

// headerEngine answers body and records the traceparent it was sent.
func headerEngine(t *testing.T, status int, body string) (*proxytest.Engine, func() string) {
	var mu sync.Mutex
	var tp string
	e := proxytest.NewEngine(t, func(ctx *fasthttp.RequestCtx) {
		mu.Lock()
		tp = string(ctx.Request.Header.Peek("traceparent"))
		mu.Unlock()
		proxytest.JSONAnswer(status, body)(ctx)
	})
	return e, func() string { mu.Lock(); defer mu.Unlock(); return tp }
}

// TestTracedLegsSendTheirHeadersAndReport: each leg sends its own trace
// header lines, and each reports once what it did.
func TestTracedLegsSendTheirHeadersAndReport(t *testing.T) {
	pe, ptp := headerEngine(t, 200, `{"text":""}`)
	de, dtp := headerEngine(t, 200, `{"text":"abc"}`)
	pr := newPDPair(t, pe.URL, de.URL)
	x := pr.exchange(t, false)
	reps := &legReports{}
	x.Tracer = reps
	ptrace := []byte("traceparent: 00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01\r\n")
	x.PrefillTrace, x.DecodeTrace = ptrace, []byte("traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\n")
	before := time.Now()
	ans, err := pr.px.Do(x)
	copy(ptrace, "xxxxxxxxxxx") // the caller's buffer may change once Do returned
	if err != nil {
		t.Fatal(err)
	}
	ans.Release()
	p, d := reps.both(t)
	if got := ptp(); got != "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01" {
		t.Errorf("prefill got traceparent %q", got)
	}
	if got := dtp(); got != "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" {
		t.Errorf("decode got traceparent %q", got)
	}
	if p.Status != 200 || p.Bytes != len(`{"text":""}`) || p.Err != nil || p.FirstByte.Before(before) || p.End.Before(p.FirstByte) {
		t.Errorf("prefill report %+v", p)
	}
	if d.Status != 200 || d.Bytes != len(`{"text":"abc"}`) || d.Err != nil || d.FirstByte.IsZero() {
		t.Errorf("decode report %+v", d)
	}
	pr.settled(t)
}

// TestTracedPrefillFailure: the failed prefill reports its status and
// cause, the decode it cut reports that it was cut.
func TestTracedPrefillFailure(t *testing.T) {
	pe := proxytest.NewEngine(t, proxytest.JSONAnswer(500, `{"error":"boom"}`))
	de, _ := holdingEngine(t) // its arrivals are buffered: the decode may or may not be sent before the cut
	pr := newPDPair(t, pe.URL, de.URL)
	x := pr.exchange(t, false)
	reps := &legReports{}
	x.Tracer = reps
	if _, err := pr.px.Do(x); err == nil || err.Status != 500 {
		t.Fatalf("err = %v, want the prefill's 500", err)
	}
	p, d := reps.both(t)
	if p.Status != 500 || p.Err == nil || p.Err.Kind != KindStatus || !p.FirstByte.IsZero() {
		t.Errorf("prefill report %+v", p)
	}
	if d.Status != 0 || d.Err == nil || d.Err.Kind != KindCancelled {
		t.Errorf("decode report %+v, want cut by pdlb", d)
	}
	pr.settled(t)
}

// TestTracedStreamReportsItsEvents: a streamed decode reports when its
// relay ends, with the events and bytes relayed; the prefill's stream is
// counted as it is drained.
func TestTracedStreamReportsItsEvents(t *testing.T) {
	pe := sseEngine(t, "data: {}\n\ndata: [DONE]\n\n")
	de := sseEngine(t, "data: {\"text\":\"a\"}\n\ndata: {\"text\":\"ab\"}\n\ndata: [DONE]\n\n")
	pr := newPDPair(t, pe.URL, de.URL)
	x := pr.exchange(t, true)
	reps := &legReports{}
	x.Tracer = reps
	ans, err := pr.px.Do(x)
	if err != nil {
		t.Fatal(err)
	}
	res := relay(t, ans.Stream, &clientRecorder{})
	p, d := reps.both(t)
	if d.Status != 200 || d.Events != 3 || d.Bytes != res.Bytes || d.Err != nil || d.FirstByte.IsZero() {
		t.Errorf("decode report %+v, relay %+v", d, res)
	}
	if p.Status != 200 || p.Events != 2 || p.Err != nil {
		t.Errorf("prefill report %+v", p)
	}
	pr.settled(t)
}

// An untraced attempt sends no extra header lines.
func TestUntracedHeadIsUnchanged(t *testing.T) {
	got := string(appendRequestHead(nil, "/generate", "e:1", 2, "r", nil, nil))
	want := "POST /generate HTTP/1.1\r\nHost: e:1\r\nContent-Type: application/json\r\nContent-Length: 2\r\nX-Request-ID: r\r\n\r\n"
	if got != want {
		t.Errorf("head %q, want %q", got, want)
	}
}
