package router

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"pdlb/proxy"
)

func testBackend(t testing.TB, url string, role proxy.Role) *proxy.Backend {
	t.Helper()
	b, err := proxy.NewBackend(url, role, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBackendSeries: legs are counted by result as the breaker sees them,
// answer times land in the bucket whose bound is the first at or above
// them, and the exposition and Backend read the same counts.
func TestBackendSeries(t *testing.T) {
	m := NewMetrics(proxy.NewPool(nil))
	d := testBackend(t, "http://d:1", proxy.Decode)
	m.LegDone(d, nil)
	m.LegDone(d, nil)
	m.LegDone(d, &proxy.UpstreamError{Backend: d, Kind: proxy.KindStatus, Status: 500})
	m.LegDone(d, &proxy.UpstreamError{Backend: d, Kind: proxy.KindConnect, Err: errors.New("refused")})
	m.LegDone(d, &proxy.UpstreamError{Backend: d, Kind: proxy.KindStatus, Status: 404})
	m.LegDone(d, &proxy.UpstreamError{Backend: d, Kind: proxy.KindCancelled})
	m.LegAnswered(d, time.Millisecond)    // le 0.001 exactly
	m.LegAnswered(d, 30*time.Millisecond) // le 0.05
	m.LegAnswered(d, time.Hour)           // +Inf

	c := m.Backend(proxy.Decode, "http://d:1")
	if c.Results != [numResults]uint64{ResultOK: 2, ResultError: 2, ResultClientError: 1, ResultCancelled: 1} {
		t.Errorf("results %v", c.Results)
	}
	var want [len(durationBounds) + 1]uint64
	want[0], want[5], want[len(want)-1] = 1, 1, 1
	if c.TTFT != want {
		t.Errorf("TTFT buckets %v, want %v", c.TTFT, want)
	}
	if (m.Backend(proxy.Prefill, "http://d:1") != BackendCounts{}) {
		t.Error("a prefill at the decode's URL shares its counts")
	}

	var out bytes.Buffer
	m.WritePrometheus(&out)
	for _, line := range []string{
		`pdlb_backend_requests_total{role="decode",url="http://d:1",result="ok"} 2`,
		`pdlb_backend_requests_total{role="decode",url="http://d:1",result="error"} 2`,
		`pdlb_backend_requests_total{role="decode",url="http://d:1",result="client_error"} 1`,
		`pdlb_backend_requests_total{role="decode",url="http://d:1",result="cancelled"} 1`,
		`pdlb_backend_ttft_seconds_bucket{role="decode",url="http://d:1",le="0.001"} 1`,
		`pdlb_backend_ttft_seconds_bucket{role="decode",url="http://d:1",le="0.025"} 1`,
		`pdlb_backend_ttft_seconds_bucket{role="decode",url="http://d:1",le="0.05"} 2`,
		`pdlb_backend_ttft_seconds_bucket{role="decode",url="http://d:1",le="1800"} 2`,
		`pdlb_backend_ttft_seconds_bucket{role="decode",url="http://d:1",le="+Inf"} 3`,
		`pdlb_backend_ttft_seconds_sum{role="decode",url="http://d:1"} 3600.031`,
		`pdlb_backend_ttft_seconds_count{role="decode",url="http://d:1"} 3`,
	} {
		if !strings.Contains(out.String(), line+"\n") {
			t.Errorf("exposition lacks %s", line)
		}
	}
	if t.Failed() {
		t.Logf("exposition:\n%s", out.String())
	}
}

// TestBackendSeriesPerMetrics: the series cached on a backend belong to
// the Metrics that made them; a second Metrics (another router over the
// same backends) keeps its own counts.
func TestBackendSeriesPerMetrics(t *testing.T) {
	a, b := NewMetrics(nil), NewMetrics(nil)
	d := testBackend(t, "http://d:1", proxy.Decode)
	a.LegDone(d, nil)
	b.LegDone(d, nil)
	b.LegDone(d, nil)
	a.LegDone(d, nil)
	a.LegDone(d, nil)
	if got := a.Backend(proxy.Decode, d.URL).Results[ResultOK]; got != 3 {
		t.Errorf("first Metrics counted %d legs, want 3", got)
	}
	if got := b.Backend(proxy.Decode, d.URL).Results[ResultOK]; got != 2 {
		t.Errorf("second Metrics counted %d legs, want 2", got)
	}
}

// TestLegMetricsAllocateNothing: once a backend has had a leg, recording
// its legs allocates nothing.
func TestLegMetricsAllocateNothing(t *testing.T) {
	m := NewMetrics(nil)
	b := testBackend(t, "http://10.0.0.1:30000", proxy.Decode)
	fail := &proxy.UpstreamError{Backend: b, Kind: proxy.KindStatus, Status: 503}
	record := func() {
		m.LegAnswered(b, 3*time.Millisecond)
		m.LegDone(b, nil)
		m.LegDone(b, fail)
	}
	record()
	if n := testing.AllocsPerRun(1000, record); n != 0 {
		t.Fatalf("%v allocations per recorded leg, want 0", n)
	}
}

// BenchmarkLegMetrics is what one request adds to the request path: both
// legs answered and done.
func BenchmarkLegMetrics(b *testing.B) {
	m := NewMetrics(nil)
	p := testBackend(b, "http://10.0.0.1:30000", proxy.Prefill)
	d := testBackend(b, "http://10.0.0.2:30001", proxy.Decode)
	b.ReportAllocs()
	for b.Loop() {
		m.LegAnswered(p, 40*time.Millisecond)
		m.LegDone(p, nil)
		m.LegAnswered(d, 45*time.Millisecond)
		m.LegDone(d, nil)
	}
}

// TestRecentErrorsKeepTheLast: the ring keeps the last 20, newest first.
func TestRecentErrorsKeepTheLast(t *testing.T) {
	var e recentErrors
	if got := e.list(); len(got) != 0 {
		t.Fatalf("empty ring lists %d", len(got))
	}
	for i := range 25 {
		e.add(RecentError{Status: 500 + i})
	}
	got := e.list()
	if len(got) != recentErrorsKept || got[0].Status != 524 || got[len(got)-1].Status != 505 {
		t.Fatalf("kept %d, newest %d, oldest %d; want 20, 524, 505", len(got), got[0].Status, got[len(got)-1].Status)
	}
}
