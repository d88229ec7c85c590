package router

import (
	"io"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"pdlb/proxy"
)

// Leg results of pdlb_backend_requests_total, as the backend's breaker
// sees them.
const (
	// ResultOK: the backend answered 2xx.
	ResultOK = iota
	// ResultError: a connect error, timeout, 5xx or broken answer; what the
	// breaker counts as a failure.
	ResultError
	// ResultClientError: the backend answered 4xx (the client's fault; the
	// backend is alive).
	ResultClientError
	// ResultCancelled: pdlb cut the leg itself (its sibling failed, the
	// client left); neither success nor failure.
	ResultCancelled
	numResults
)

var resultNames = [numResults]string{"ok", "error", "client_error", "cancelled"}

// backendKey names a backend's series. A backend removed and added again
// under its URL continues its series (as a route's counters do), so the
// series never repeat in one scrape.
type backendKey struct {
	role proxy.Role
	url  string
}

// backendSeries are one backend's request-path series, updated lock-free
// by the legs' goroutines and read at scrape time and by the status page.
type backendSeries struct {
	owner   *Metrics // whose series these are (see seriesOf)
	labels  string   // {role="…",url="…"}
	results [numResults]atomic.Uint64
	ttft    durationHistogram
}

// LegAnswered records b's answer time in pdlb_backend_ttft_seconds
// (proxy.LegObserver).
func (m *Metrics) LegAnswered(b *proxy.Backend, d time.Duration) {
	m.seriesOf(b).ttft.observe(d)
}

// LegDone counts b's leg in pdlb_backend_requests_total by its result
// (proxy.LegObserver).
func (m *Metrics) LegDone(b *proxy.Backend, err *proxy.UpstreamError) {
	m.seriesOf(b).results[legResult(err)].Add(1)
}

// seriesOf returns b's series: cached on b after its first leg, so a leg
// costs a pointer load, not a map lookup (which hashed the URL: about 1,400
// instructions per request, measured with callgrind).
func (m *Metrics) seriesOf(b *proxy.Backend) *backendSeries {
	if s, ok := b.Observed().(*backendSeries); ok && s.owner == m {
		return s
	}
	s := m.backend(b.Role, b.URL)
	b.SetObserved(s)
	return s
}

func legResult(err *proxy.UpstreamError) int {
	switch {
	case err == nil:
		return ResultOK
	case err.Kind == proxy.KindCancelled:
		return ResultCancelled
	case err.PairFault():
		return ResultError // the decode failed the request, whoever's fault
	case !err.CountsAsFailure():
		return ResultClientError
	}
	return ResultError
}

// backend returns the series of (role, url), creating them on first use:
// after that, recording allocates nothing (one sync.Map load).
func (m *Metrics) backend(role proxy.Role, url string) *backendSeries {
	k := backendKey{role, url}
	s, ok := m.backends.Load(k)
	if !ok {
		s, _ = m.backends.LoadOrStore(k, &backendSeries{owner: m, labels: `{role="` + role.String() + `",url=` + strconv.Quote(url) + `}`})
	}
	return s.(*backendSeries)
}

// BackendCounts is a backend's request-path counters at one moment: what
// the status page samples.
type BackendCounts struct {
	// Results counts legs by result (ResultOK, …).
	Results [numResults]uint64
	// TTFT counts answer times per bucket of TTFTBounds (not cumulative);
	// the last entry is above the last bound.
	TTFT [len(durationBounds) + 1]uint64
}

// TTFTBounds are the upper bounds, in seconds, of BackendCounts.TTFT's
// buckets (the le labels of pdlb_backend_ttft_seconds).
func TTFTBounds() []float64 { return durationBounds[:] }

// Backend reads the counters of (role, url); zero for a backend that has
// had no leg yet.
func (m *Metrics) Backend(role proxy.Role, url string) BackendCounts {
	var c BackendCounts
	if m == nil {
		return c
	}
	v, ok := m.backends.Load(backendKey{role, url})
	if !ok {
		return c
	}
	s := v.(*backendSeries)
	for i := range c.Results {
		c.Results[i] = s.results[i].Load()
	}
	for i := range c.TTFT {
		c.TTFT[i] = s.ttft.counts[i].Load()
	}
	return c
}

// writeBackendSeries writes every backend's request and TTFT series, in
// label order so a scrape reads the same way each time.
func (m *Metrics) writeBackendSeries(w io.Writer) {
	var all []*backendSeries
	m.backends.Range(func(_, v any) bool {
		all = append(all, v.(*backendSeries))
		return true
	})
	slices.SortFunc(all, func(a, b *backendSeries) int { return strings.Compare(a.labels, b.labels) })
	for _, s := range all {
		inner := s.labels[1 : len(s.labels)-1]
		for i := range s.results {
			metrics.WriteCounterUint64(w, `pdlb_backend_requests_total{`+inner+`,result="`+resultNames[i]+`"}`, s.results[i].Load())
		}
		s.ttft.write(w, "pdlb_backend_ttft_seconds", inner)
	}
}

// durationHistogram is a Prometheus histogram of durations over
// durationBounds, updated with two atomic adds and no lock. It exists next
// to the library's PrometheusHistogram because the status page reads its
// bucket counts, which that type does not expose.
type durationHistogram struct {
	counts   [len(durationBounds) + 1]atomic.Uint64 // per bucket; the last is +Inf
	sumNanos atomic.Uint64
}

// durationBoundsNanos are durationBounds as durations, compared without
// floating point on the request path.
var durationBoundsNanos = func() (out [len(durationBounds)]time.Duration) {
	for i, b := range durationBounds {
		out[i] = time.Duration(b * float64(time.Second))
	}
	return out
}()

func (h *durationHistogram) observe(d time.Duration) {
	d = max(d, 0)
	i, _ := slices.BinarySearch(durationBoundsNanos[:], d) // first bound ≥ d: le is inclusive
	h.counts[i].Add(1)
	h.sumNanos.Add(uint64(d))
}

// write writes the histogram's _bucket (cumulative), _sum and _count
// samples; inner is its labels without braces.
func (h *durationHistogram) write(w io.Writer, name, inner string) {
	var cum uint64
	for i := range h.counts {
		cum += h.counts[i].Load()
		le := "+Inf"
		if i < len(durationBounds) {
			le = strconv.FormatFloat(durationBounds[i], 'g', -1, 64)
		}
		metrics.WriteCounterUint64(w, name+`_bucket{`+inner+`,le="`+le+`"}`, cum)
	}
	metrics.WriteCounterFloat64(w, name+`_sum{`+inner+`}`, time.Duration(h.sumNanos.Load()).Seconds())
	metrics.WriteCounterUint64(w, name+`_count{`+inner+`}`, cum)
}
