package router

import (
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/sony/gobreaker/v2"
	"github.com/valyala/fasthttp"

	"pdlb/proxy"
)

// Metrics is pdlb's Prometheus exposition (VictoriaMetrics/metrics: no
// reflection, no locks on the update path). Request-time series are looked
// up by struct keys in sync.Maps, so recording allocates nothing after the
// first request of each (route, status); per-backend series are written at
// scrape time from the pool's own atomic counters.
type Metrics struct {
	set       *metrics.Set
	requests  sync.Map // reqKey → *metrics.Counter
	durations sync.Map // route → *metrics.PrometheusHistogram
	ttft      sync.Map // route → *metrics.PrometheusHistogram
	retries   sync.Map // route → *metrics.Counter
	pool      *proxy.Pool
	// extra writers (registry status, admission gauges) added by the wiring.
	mu     sync.Mutex
	extras []func(w io.Writer)
}

type reqKey struct {
	route  string
	status int
}

// Buckets for request durations and TTFT: 1 ms … 30 min, LLM-shaped.
var durationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800}

// NewMetrics builds the metric set; pool feeds the per-backend series.
func NewMetrics(pool *proxy.Pool) *Metrics {
	m := &Metrics{set: metrics.NewSet(), pool: pool}
	m.set.RegisterMetricsWriter(m.writeDynamic)
	return m
}

// Request records one finished request.
func (m *Metrics) Request(route string, status int, d time.Duration) {
	if m == nil {
		return
	}
	k := reqKey{route, status}
	c, ok := m.requests.Load(k)
	if !ok {
		c, _ = m.requests.LoadOrStore(k, m.set.GetOrCreateCounter(fmt.Sprintf(`pdlb_requests_total{route=%q,status="%d"}`, route, status)))
	}
	c.(*metrics.Counter).Inc()
	m.histogram(&m.durations, "pdlb_request_duration_seconds", route).Update(d.Seconds())
}

// TTFT records the time to the first byte sent to the client (the whole
// answer for non-streaming requests, the first event for streams).
func (m *Metrics) TTFT(route string, d time.Duration) {
	if m == nil {
		return
	}
	m.histogram(&m.ttft, "pdlb_ttft_seconds", route).Update(d.Seconds())
}

// Retry counts one retry on a fresh pair.
func (m *Metrics) Retry(route string) {
	if m == nil {
		return
	}
	c, ok := m.retries.Load(route)
	if !ok {
		c, _ = m.retries.LoadOrStore(route, m.set.GetOrCreateCounter(fmt.Sprintf(`pdlb_retries_total{route=%q}`, route)))
	}
	c.(*metrics.Counter).Inc()
}

func (m *Metrics) histogram(cache *sync.Map, name, route string) *metrics.PrometheusHistogram {
	h, ok := cache.Load(route)
	if !ok {
		h, _ = cache.LoadOrStore(route, m.set.GetOrCreatePrometheusHistogramExt(fmt.Sprintf(`%s{route=%q}`, name, route), durationBuckets))
	}
	return h.(*metrics.PrometheusHistogram)
}

// BreakerChange counts a breaker transition (wired as the breakers' hook).
func (m *Metrics) BreakerChange(name string, from, to gobreaker.State) {
	m.set.GetOrCreateCounter(fmt.Sprintf(`pdlb_breaker_transitions_total{backend=%q,from=%q,to=%q}`, name, from.String(), to.String())).Inc()
}

// HealthCheck counts one active health-check result.
func (m *Metrics) HealthCheck(b *proxy.Backend, ok bool) {
	result := "fail"
	if ok {
		result = "ok"
	}
	m.set.GetOrCreateCounter(fmt.Sprintf(`pdlb_health_checks_total{role=%q,url=%q,result=%q}`, b.Role.String(), b.URL, result)).Inc()
}

// Counter returns (creating) a counter by its full name with labels; for
// rare events (bootstrap requests, admission refusals).
func (m *Metrics) Counter(name string) *metrics.Counter {
	if m == nil {
		return new(metrics.Counter) // counted nowhere
	}
	return m.set.GetOrCreateCounter(name)
}

// AddWriter adds series written at scrape time.
func (m *Metrics) AddWriter(f func(w io.Writer)) {
	m.mu.Lock()
	m.extras = append(m.extras, f)
	m.mu.Unlock()
}

func (m *Metrics) writeDynamic(w io.Writer) {
	for _, role := range []proxy.Role{proxy.Prefill, proxy.Decode} {
		for _, b := range m.pool.Backends(role) {
			labels := `{role="` + role.String() + `",url=` + strconv.Quote(b.URL) + `}`
			metrics.WriteGaugeUint64(w, "pdlb_backend_in_flight"+labels, uint64(max(0, b.InFlight())))
			metrics.WriteCounterUint64(w, "pdlb_backend_selected_total"+labels, b.Selected())
			metrics.WriteGaugeUint64(w, "pdlb_backend_healthy"+labels, boolGauge(b.Healthy()))
			metrics.WriteGaugeUint64(w, "pdlb_backend_registry_ready"+labels, boolGauge(m.pool.RegistryReady(b)))
			if br := b.Breaker(); br != nil {
				// 0 closed, 1 half-open, 2 open (gobreaker's order).
				metrics.WriteGaugeUint64(w, "pdlb_breaker_state"+labels, uint64(br.State()))
			}
		}
	}
	m.mu.Lock()
	extras := m.extras
	m.mu.Unlock()
	for _, f := range extras {
		f(w)
	}
}

func boolGauge(v bool) uint64 {
	if v {
		return 1
	}
	return 0
}

// Handler serves the Prometheus text exposition.
func (m *Metrics) Handler(ctx *fasthttp.RequestCtx) {
	ctx.SetContentType("text/plain; version=0.0.4")
	m.set.WritePrometheus(ctx)
	metrics.WriteProcessMetrics(ctx)
}

// observeAdmission writes the admission gate's gauges at scrape time.
func (m *Metrics) observeAdmission(a *Admission) {
	if m == nil {
		return
	}
	m.AddWriter(func(w io.Writer) {
		metrics.WriteGaugeUint64(w, "pdlb_admission_in_flight", uint64(a.InFlight()))
		metrics.WriteGaugeUint64(w, "pdlb_admission_queued", uint64(a.Queued()))
	})
}
