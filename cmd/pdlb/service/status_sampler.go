package service

import (
	"context"
	"sync"
	"time"

	"pdlb"
	"pdlb/proxy"
	"pdlb/router"
)

// The status page's windows. Rates look back rateWindow so they follow a
// change within seconds; TTFT percentiles look back a whole ring so a
// backend with few requests still has some.
const (
	sampleEvery  = time.Second
	ringSamples  = 60
	rateSamples  = 10 // rateWindow in samples
	rateWindow   = rateSamples * sampleEvery
	ttftWindow   = ringSamples * sampleEvery
	classesKnown = 6 // status classes 0xx … 5xx, as Metrics.RequestsByClass
)

// backendID names a backend's series (router's per-backend series key).
type backendID struct {
	role proxy.Role
	url  string
}

// sample is the counters /metrics exposes, read at one moment. A
// backend's counts are in counts at index[id] (a map of the counts
// themselves would allocate each: Go stores large map values apart).
type sample struct {
	at      time.Time
	classes [classesKnown]uint64
	index   map[backendID]int
	counts  []router.BackendCounts
}

func (smp *sample) get(id backendID) (router.BackendCounts, bool) {
	i, ok := smp.index[id]
	if !ok {
		return router.BackendCounts{}, false
	}
	return smp.counts[i], true
}

// statusSampler reads the request counters and per-backend counters of
// /metrics once a second into a ring of the last minute, from which the
// status page derives rates and percentiles: it keeps no counts of its own.
// A slot's map is cleared and refilled, so sampling allocates nothing once
// the ring has gone round with a stable set of backends.
type statusSampler struct {
	metrics *router.Metrics
	// backends lists what to sample: the pool and the backends draining.
	backends func() []*proxy.Backend
	clock    pdlb.Clock

	mu   sync.Mutex
	ring [ringSamples]sample
	n    int // samples taken
}

func newStatusSampler(m *router.Metrics, backends func() []*proxy.Backend, clock pdlb.Clock) *statusSampler {
	return &statusSampler{metrics: m, backends: backends, clock: clock.OrSystem()}
}

// run samples now and then every sampleEvery until ctx ends.
func (s *statusSampler) run(ctx context.Context) {
	for {
		s.sample()
		if s.clock.Sleep(ctx, sampleEvery) != nil {
			return
		}
	}
}

// sample takes one sample into the ring.
func (s *statusSampler) sample() {
	bs := s.backends()
	now := s.clock.Now()
	classes := s.metrics.RequestsByClass()
	s.mu.Lock()
	defer s.mu.Unlock()
	slot := &s.ring[s.n%ringSamples]
	if slot.index == nil {
		slot.index = make(map[backendID]int, len(bs))
	}
	clear(slot.index)
	slot.at, slot.classes, slot.counts = now, classes, slot.counts[:0]
	for _, b := range bs {
		slot.index[backendID{b.Role, b.URL}] = len(slot.counts)
		slot.counts = append(slot.counts, s.metrics.Backend(b.Role, b.URL))
	}
	s.n++
}

// window is the samples of the last `back` intervals, oldest first (at
// most back+1 of them); it holds s.mu's view at the time of the call.
type window []*sample

func (s *statusSampler) window(back int) window {
	k := min(s.n, back+1, ringSamples)
	w := make(window, k)
	for i := range k {
		w[i] = &s.ring[(s.n-k+i)%ringSamples]
	}
	return w
}

// span finds the oldest sample of w holding id and the newest; ok is false
// when fewer than two samples hold it (no rate yet).
func (w window) span(id backendID) (first, last router.BackendCounts, d time.Duration, ok bool) {
	if len(w) < 2 {
		return first, last, 0, false
	}
	newest := w[len(w)-1]
	last, ok = newest.get(id)
	if !ok {
		return first, last, 0, false
	}
	for _, smp := range w[:len(w)-1] {
		if c, has := smp.get(id); has {
			return c, last, newest.at.Sub(smp.at), newest.at.After(smp.at)
		}
	}
	return first, last, 0, false
}

// legs is the number of legs counted in c (all results).
func legs(c router.BackendCounts) uint64 {
	var n uint64
	for _, v := range c.Results {
		n += v
	}
	return n
}

// backendRates derives a backend's numbers from the ring: legs per second
// and error ratio over rateWindow, TTFT percentiles over ttftWindow, and
// legs per second for each interval of the ring (oldest first).
type backendRates struct {
	reqPerS     float64
	errorRate   *float64 // nil: no legs in the window
	p50, p99    *float64 // seconds; nil: no answer in the window
	reqPerSHist []float64
}

func (s *statusSampler) rates(id backendID) backendRates {
	s.mu.Lock()
	defer s.mu.Unlock()
	var r backendRates
	if first, last, d, ok := s.window(rateSamples).span(id); ok {
		r.reqPerS = float64(legs(last)-legs(first)) / d.Seconds()
		good := last.Results[router.ResultOK] - first.Results[router.ResultOK]
		bad := last.Results[router.ResultError] - first.Results[router.ResultError]
		client := last.Results[router.ResultClientError] - first.Results[router.ResultClientError]
		if n := good + bad + client; n > 0 {
			v := float64(bad) / float64(n)
			r.errorRate = &v
		}
	}
	w := s.window(ringSamples)
	if first, last, _, ok := w.span(id); ok {
		var delta [len(first.TTFT)]uint64
		for i := range delta {
			delta[i] = last.TTFT[i] - first.TTFT[i]
		}
		r.p50 = quantile(0.5, delta[:], router.TTFTBounds())
		r.p99 = quantile(0.99, delta[:], router.TTFTBounds())
	}
	r.reqPerSHist = make([]float64, 0, len(w))
	for i := 1; i < len(w); i++ {
		prev, okp := w[i-1].get(id)
		cur, okc := w[i].get(id)
		d := w[i].at.Sub(w[i-1].at).Seconds()
		v := 0.0
		if okp && okc && d > 0 {
			v = float64(legs(cur)-legs(prev)) / d
		}
		r.reqPerSHist = append(r.reqPerSHist, v)
	}
	return r
}

// classRates is requests answered per second by status class over
// rateWindow (index 2: 2xx, …).
func (s *statusSampler) classRates() [classesKnown]float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out [classesKnown]float64
	w := s.window(rateSamples)
	if len(w) < 2 {
		return out
	}
	first, last := w[0], w[len(w)-1]
	d := last.at.Sub(first.at).Seconds()
	if d <= 0 {
		return out
	}
	for i := range out {
		out[i] = float64(last.classes[i]-first.classes[i]) / d
	}
	return out
}

// quantile estimates the q-quantile of a histogram from its per-bucket
// counts (not cumulative; the last is above the last bound) as Prometheus's
// histogram_quantile does: linear within the bucket that holds the rank,
// the last finite bound when the rank falls above it. nil for no counts.
func quantile(q float64, counts []uint64, bounds []float64) *float64 {
	var total uint64
	for _, c := range counts {
		total += c
	}
	if total == 0 {
		return nil
	}
	rank := q * float64(total)
	var cum uint64
	for i, c := range counts {
		if float64(cum+c) < rank || c == 0 {
			cum += c
			continue
		}
		if i == len(bounds) {
			v := bounds[len(bounds)-1]
			return &v
		}
		lower := 0.0
		if i > 0 {
			lower = bounds[i-1]
		}
		v := lower + (bounds[i]-lower)*(rank-float64(cum))/float64(c)
		return &v
	}
	v := bounds[len(bounds)-1]
	return &v
}
