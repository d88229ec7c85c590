package service

import (
	"math"
	"strconv"
	"testing"
	"time"

	"pdlb"
	"pdlb/proxy"
	"pdlb/router"
)

// fakeClock is the sampler's clock in tests: the test moves Now.
type fakeClock struct{ now time.Time }

func (c *fakeClock) clock() pdlb.Clock { return pdlb.Clock{Now: func() time.Time { return c.now }} }

func (c *fakeClock) advance(d time.Duration) { c.now = c.now.Add(d) }

// TestSamplerRatesFromTheRing: rates, error ratio, percentiles and the
// sparkline come from the difference of sampled counters over their
// windows, the newest sample included, and follow the ring as it wraps.
func TestSamplerRatesFromTheRing(t *testing.T) {
	m := router.NewMetrics(nil)
	d, err := proxy.NewBackend("http://d:1", proxy.Decode, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{now: time.Unix(1000, 0)}
	s := newStatusSampler(m, func() []*proxy.Backend { return []*proxy.Backend{d} }, clk.clock())
	id := backendID{proxy.Decode, "http://d:1"}

	if r := s.rates(id); r.reqPerS != 0 || r.errorRate != nil || r.p50 != nil || len(r.reqPerSHist) != 0 {
		t.Fatalf("no samples: %+v", r)
	}
	s.sample()
	if r := s.rates(id); r.reqPerS != 0 || r.errorRate != nil || r.p50 != nil {
		t.Fatalf("one sample has no rate: %+v", r)
	}
	// 100 seconds of 4 legs a second: 3 ok (20 ms each), 1 failed.
	for sec := range 100 {
		for range 3 {
			m.LegDone(d, nil)
			m.LegAnswered(d, 20*time.Millisecond)
		}
		m.LegDone(d, &proxy.UpstreamError{Backend: d, Kind: proxy.KindStatus, Status: 500})
		if sec == 99 {
			// The last second is slower: 40 legs, all answered in 3 s.
			for range 40 {
				m.LegDone(d, nil)
				m.LegAnswered(d, 3*time.Second)
			}
		}
		clk.advance(time.Second)
		s.sample()
	}
	r := s.rates(id)
	// Over the last 10 s: 9×4 + 44 legs, 10 failures out of 80.
	if want := 80.0 / 10; !near(r.reqPerS, want) {
		t.Errorf("req/s %v, want %v", r.reqPerS, want)
	}
	if r.errorRate == nil || !near(*r.errorRate, 10.0/80) {
		t.Errorf("error rate %v, want %v", deref(r.errorRate), 10.0/80)
	}
	// Over the last minute: 180 answers of 20 ms (bucket 0.01–0.025) and 40
	// of 3 s (bucket 2.5–5): the median in the first, the 99th in the second.
	if r.p50 == nil || *r.p50 <= 0.01 || *r.p50 > 0.025 {
		t.Errorf("p50 %v, want within (0.01, 0.025]", deref(r.p50))
	}
	if r.p99 == nil || *r.p99 <= 2.5 || *r.p99 > 5 {
		t.Errorf("p99 %v, want within (2.5, 5]", deref(r.p99))
	}
	if len(r.reqPerSHist) != ringSamples-1 || r.reqPerSHist[0] != 4 || r.reqPerSHist[len(r.reqPerSHist)-1] != 44 {
		t.Errorf("history of %d: first %v, last %v; want 59, 4, 44", len(r.reqPerSHist), r.reqPerSHist[0], r.reqPerSHist[len(r.reqPerSHist)-1])
	}
	if c := s.classRates(); c != [classesKnown]float64{} {
		t.Errorf("no requests answered, class rates %v", c)
	}
}

// TestSamplerNewBackend: a backend that appears mid-window is rated from
// its first sample, not from zero before it.
func TestSamplerNewBackend(t *testing.T) {
	m := router.NewMetrics(nil)
	d, _ := proxy.NewBackend("http://d:1", proxy.Decode, time.Second)
	for range 1000 { // counted before, under the same URL (a backend added again)
		m.LegDone(d, nil)
	}
	var shown []*proxy.Backend
	clk := &fakeClock{now: time.Unix(1000, 0)}
	s := newStatusSampler(m, func() []*proxy.Backend { return shown }, clk.clock())
	for range 5 {
		s.sample()
		clk.advance(time.Second)
	}
	shown = []*proxy.Backend{d}
	s.sample()
	clk.advance(time.Second)
	m.LegDone(d, nil)
	m.LegDone(d, nil)
	s.sample()
	r := s.rates(backendID{proxy.Decode, "http://d:1"})
	if r.reqPerS != 2 {
		t.Fatalf("req/s %v, want 2 (from its first sample)", r.reqPerS)
	}
	if h := r.reqPerSHist; len(h) != 6 || h[4] != 0 || h[5] != 2 {
		t.Fatalf("history %v, want five 0 then 2", h)
	}
}

// TestSamplerAllocatesNothingOnceWarm: a sample refills its slot.
func TestSamplerAllocatesNothingOnceWarm(t *testing.T) {
	m := router.NewMetrics(nil)
	var bs []*proxy.Backend
	for _, u := range []string{"http://a:1", "http://b:1", "http://c:1"} {
		b, _ := proxy.NewBackend(u, proxy.Decode, time.Second)
		m.LegDone(b, nil)
		bs = append(bs, b)
	}
	s := newStatusSampler(m, func() []*proxy.Backend { return bs }, pdlb.SystemClock())
	for range ringSamples {
		s.sample()
	}
	if n := testing.AllocsPerRun(100, s.sample); n != 0 {
		t.Fatalf("%v allocations per sample, want 0", n)
	}
}

// BenchmarkStatusSample is the sampler's cost per second with 64 backends.
func BenchmarkStatusSample(b *testing.B) {
	m := router.NewMetrics(nil)
	var bs []*proxy.Backend
	for i := range 64 {
		be, err := proxy.NewBackend("http://10.0.0."+strconv.Itoa(i+1)+":30000", proxy.Decode, time.Second)
		if err != nil {
			b.Fatal(err)
		}
		m.LegDone(be, nil)
		bs = append(bs, be)
	}
	s := newStatusSampler(m, func() []*proxy.Backend { return bs }, pdlb.SystemClock())
	b.ReportAllocs()
	for b.Loop() {
		s.sample()
	}
}

func TestQuantile(t *testing.T) {
	bounds := []float64{1, 2, 4}
	for _, c := range []struct {
		name   string
		q      float64
		counts []uint64
		want   float64 // NaN: nil
	}{
		{"empty", 0.5, []uint64{0, 0, 0, 0}, math.NaN()},
		{"all in the first bucket: interpolated from 0", 0.5, []uint64{10, 0, 0, 0}, 0.5},
		{"within the second bucket", 0.75, []uint64{5, 5, 0, 0}, 1.5},
		{"empty buckets between", 0.99, []uint64{50, 0, 50, 0}, 2 + 2*0.98},
		{"above the last bound: the last bound", 0.99, []uint64{1, 0, 0, 99}, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := quantile(c.q, c.counts, bounds)
			if math.IsNaN(c.want) {
				if got != nil {
					t.Fatalf("got %v, want none", *got)
				}
				return
			}
			if got == nil || !near(*got, c.want) {
				t.Fatalf("got %v, want %v", deref(got), c.want)
			}
		})
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}
