package router

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/sony/gobreaker/v2"
	"github.com/valyala/bytebufferpool"
	"github.com/valyala/fasthttp"

	"pdlb/proxy"
)

// Metrics is pdlb's Prometheus exposition (VictoriaMetrics/metrics: no
// reflection, no locks on the update path). Request-time series are looked
// up by struct keys in sync.Maps, so recording allocates nothing after the
// first request of each (route, status); per-backend series are written at
// scrape time from the pool's own atomic counters. Every family it exposes
// is described in families, which gives the scrape its # HELP and # TYPE.
type Metrics struct {
	set       *metrics.Set
	requests  sync.Map // reqKey → *metrics.Counter
	durations sync.Map // route → *metrics.PrometheusHistogram
	ttft      sync.Map // route → *metrics.PrometheusHistogram
	retries   sync.Map // route → *metrics.Counter
	aborts    sync.Map // abortKey → *metrics.Counter
	backends  sync.Map // backendKey → *backendSeries (backend_metrics.go)
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
var (
	durationBounds  = [...]float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800}
	durationBuckets = durationBounds[:]
)

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

// Migration counts one mid-stream migration by result (migrate.go); they
// are rare, so the series is looked up by name.
func (m *Metrics) Migration(result string) {
	if m == nil {
		return
	}
	m.set.GetOrCreateCounter(`pdlb_migrations_total{result="` + result + `"}`).Inc()
}

// RequestsByClass sums pdlb_requests_total over routes by status class:
// index 2 is 2xx, 4 is 4xx (499, a client that left, included), 5 is 5xx.
func (m *Metrics) RequestsByClass() [6]uint64 {
	var out [6]uint64
	if m == nil {
		return out
	}
	m.requests.Range(func(k, c any) bool {
		if class := k.(reqKey).status / 100; class >= 0 && class < len(out) {
			out[class] += c.(*metrics.Counter).Get()
		}
		return true
	})
	return out
}

func (m *Metrics) histogram(cache *sync.Map, name, route string) *metrics.PrometheusHistogram {
	h, ok := cache.Load(route)
	if !ok {
		h, _ = cache.LoadOrStore(route, m.set.GetOrCreatePrometheusHistogramExt(fmt.Sprintf(`%s{route=%q}`, name, route), durationBuckets))
	}
	return h.(*metrics.PrometheusHistogram)
}

var (
	_ proxy.LegObserver   = (*Metrics)(nil)
	_ proxy.AbortObserver = (*Metrics)(nil)
)

type abortKey struct {
	role   proxy.Role
	why    proxy.AbortReason
	result proxy.AbortResult
}

// Aborted counts aborts sent (or not) to engines: proxy.AbortObserver.
func (m *Metrics) Aborted(b *proxy.Backend, why proxy.AbortReason, result proxy.AbortResult, n int) {
	if m == nil {
		return
	}
	k := abortKey{b.Role, why, result}
	c, ok := m.aborts.Load(k)
	if !ok {
		c, _ = m.aborts.LoadOrStore(k, m.set.GetOrCreateCounter(fmt.Sprintf(`pdlb_aborts_total{role=%q,reason=%q,result=%q}`, b.Role.String(), why.String(), result.String())))
	}
	c.(*metrics.Counter).Add(n)
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
	m.writeBackendSeries(w)
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
	m.WritePrometheus(ctx)
}

// WritePrometheus writes the text exposition: pdlb's series and the process
// metrics, each family's samples together and led by its # HELP and # TYPE.
func (m *Metrics) WritePrometheus(w io.Writer) {
	raw := bytebufferpool.Get()
	defer bytebufferpool.Put(raw)
	m.set.WritePrometheus(raw)
	metrics.WriteProcessMetrics(raw)
	writeFamilies(w, raw.B)
}

// writeFamilies copies the samples of raw to w grouped by family, in the
// order each family first appears, and puts the family's # HELP and # TYPE
// before its first sample. The grouping is needed because the text format
// wants a family's lines contiguous, and the scrape-time writers emit their
// series backend by backend (in_flight, selected, healthy, … of one backend,
// then of the next). raw's own comment lines are dropped: families is the
// one source of metadata. A family missing from families is written without
// metadata (TestMetricFamiliesAreDescribed keeps pdlb's own from shipping so).
func writeFamilies(w io.Writer, raw []byte) {
	type sample struct {
		family int // index in names
		line   []byte
	}
	var (
		index   = map[string]int{}
		names   []string
		samples []sample
	)
	for len(raw) > 0 {
		line := raw
		if i := bytes.IndexByte(raw, '\n'); i >= 0 {
			line, raw = raw[:i+1], raw[i+1:]
		} else {
			raw = nil
		}
		if len(bytes.TrimSpace(line)) == 0 || line[0] == '#' {
			continue
		}
		name := familyOf(sampleName(line))
		i, ok := index[name]
		if !ok {
			i = len(names)
			index[name] = i
			names = append(names, name)
		}
		samples = append(samples, sample{i, line})
	}
	slices.SortStableFunc(samples, func(a, b sample) int { return cmp.Compare(a.family, b.family) })
	out := bytebufferpool.Get()
	defer bytebufferpool.Put(out)
	prev := -1
	for _, s := range samples {
		if s.family != prev {
			prev = s.family
			if f, ok := families[names[s.family]]; ok {
				out.WriteString("# HELP " + names[s.family] + " " + f.help + "\n")
				out.WriteString("# TYPE " + names[s.family] + " " + f.typ + "\n")
			}
		}
		out.Write(s.line)
		if s.line[len(s.line)-1] != '\n' {
			out.WriteByte('\n')
		}
	}
	w.Write(out.B)
}

// sampleName is the metric name of a sample line: up to its labels or value.
func sampleName(line []byte) string {
	if i := bytes.IndexAny(line, "{ \n"); i >= 0 {
		line = line[:i]
	}
	return string(line)
}

// familyOf maps a sample name to its family: a histogram's _bucket, _sum and
// _count samples (a summary's _sum and _count) belong to the histogram.
func familyOf(name string) string {
	if _, ok := families[name]; ok {
		return name
	}
	for _, suffix := range [...]string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if f := families[base]; f.typ == typeHistogram || f.typ == typeSummary && suffix != "_bucket" {
				return base
			}
		}
	}
	return name
}

// Family types of the text format.
const (
	typeCounter   = "counter"
	typeGauge     = "gauge"
	typeHistogram = "histogram"
	typeSummary   = "summary"
)

// FamilyType is the TYPE of a described family ("" for none), for tests
// and tools that check a scrape against the table.
func FamilyType(name string) string { return families[name].typ }

// FamilyNames lists the described families.
func FamilyNames() []string { return slices.Collect(maps.Keys(families)) }

// family is the metadata of one metric family.
type family struct {
	typ  string
	help string
}

// families describes every family a scrape can hold: pdlb's own, wherever
// their samples are written (a family added anywhere in the module without
// an entry here fails TestMetricFamiliesAreDescribed), and the Go runtime
// and process families of metrics.WriteProcessMetrics on Linux. Read-only.
var families = map[string]family{
	// Request path (Metrics.Request, TTFT, Retry).
	"pdlb_requests_total":           {typeCounter, "Requests answered, by route and HTTP status; a stream counts when it ends."},
	"pdlb_request_duration_seconds": {typeHistogram, "Time from a request's arrival to its last byte sent, by route."},
	"pdlb_ttft_seconds":             {typeHistogram, "Time from a request's arrival to the first byte sent to the client (the whole answer when not streaming), by route."},
	"pdlb_retries_total":            {typeCounter, "Retries of a request on a fresh prefill/decode pair, by route."},
	"pdlb_migrations_total":         {typeCounter, "Streams whose decode broke after events reached the client, by what followed: resumed on a fresh pair, finished (only [DONE] was missing), failed (no continuation could start) or exhausted (retry.migration_limit reached); the last two end with an error event."},
	// Engine-level aborts (Metrics.Aborted; proxy/abort.go).
	"pdlb_aborts_total": {typeCounter, "POST /abort_request for legs pdlb gave up, by role, reason (prefill_failed, decode_failed, client_gone, timeout) and result (ok, not_found, error, dropped over abort.max_in_flight, skipped for an engine known to lack the route, unauthorized when the engine refused pdlb's upstream_auth credentials); one per rid."},
	// Per backend, written at scrape time (Metrics.writeDynamic).
	"pdlb_backend_in_flight":      {typeGauge, "Requests in flight on the backend."},
	"pdlb_backend_selected_total": {typeCounter, "Times the backend was picked for a request."},
	"pdlb_backend_healthy":        {typeGauge, "1 while the backend passes its active health checks, else 0."},
	"pdlb_backend_registry_ready": {typeGauge, "1 when the backend's bootstrap registry namespace is ready (always 1 for decodes and without a registry), else 0."},
	"pdlb_breaker_state":          {typeGauge, "Circuit breaker state of the backend: 0 closed, 1 half-open, 2 open."},
	// Per backend, recorded by the legs (backend_metrics.go: LegDone, LegAnswered).
	"pdlb_backend_requests_total": {typeCounter, "Legs sent to the backend, by result: ok (2xx), error (connect error, timeout, 5xx, broken answer: what the breaker counts), client_error (4xx), cancelled (cut by pdlb)."},
	"pdlb_backend_ttft_seconds":   {typeHistogram, "Time from sending a leg to the backend until its answer: a decode's first byte (the first event of a stream, the whole answer otherwise), a prefill's whole answer."},
	// Breaker and health-check hooks (Metrics.BreakerChange, HealthCheck).
	"pdlb_breaker_transitions_total": {typeCounter, "Circuit breaker state changes, by backend and from/to state."},
	"pdlb_health_checks_total":       {typeCounter, "Active health-check results, by backend and result (ok or fail)."},
	// Bootstrap registry (cmd/pdlb/service/registry.go: observe, writeMetrics).
	"pdlb_registry_ranks_registered": {typeGauge, "Prefill ranks registered in the prefill's bootstrap namespace."},
	"pdlb_registry_ranks_expected":   {typeGauge, "Prefill ranks the prefill's bootstrap namespace expects; 0 until the first rank tells the topology."},
	"pdlb_bootstrap_requests_total":  {typeCounter, "Requests answered by the embedded bootstrap registry, by route (\"other\" for unknown paths) and HTTP status."},
	// Shared state of several replicas (cmd/pdlb/service/cluster.go), only with cluster.etcd.endpoints.
	"pdlb_cluster_store_up": {typeGauge, "1 while etcd answers this replica's probe (once a second), else 0; meanwhile the registry and workers are served from the last copy and writes answer 503."},
	// Kubernetes discovery (cmd/pdlb/service/discovery.go), only with discovery.kubernetes.enabled.
	"pdlb_discovery_pods": {typeGauge, "Pods serving as backends through Kubernetes discovery (Ready, with a usable port, joined), by role."},
	// Admission control (Metrics.observeAdmission; request.go: admit).
	"pdlb_admission_in_flight":     {typeGauge, "Requests admitted by admission control and not yet finished."},
	"pdlb_admission_queued":        {typeGauge, "Requests waiting in the admission queue."},
	"pdlb_admission_limit":         {typeGauge, "Requests admission control lets in at once (limits.max_concurrent_requests); 0: no cap."},
	"pdlb_admission_queue_size":    {typeGauge, "Requests that may wait for a slot (limits.queue_size); queued ÷ this is the queue's saturation."},
	"pdlb_admission_refused_total": {typeCounter, "Requests refused by admission control, by HTTP status (429 queue full, 503 queue timeout)."},
	// Streams (Metrics.observeAdmission; stream.go).
	"pdlb_streams_active": {typeGauge, "Streamed answers being relayed to clients."},
	// Pair health (pairs.go).
	"pdlb_pairs_avoided":       {typeGauge, "Prefill-decode pairs avoided now because their pairing kept failing (breaker.pair_failures)."},
	"pdlb_pair_failures_total": {typeCounter, "Failures that belong to a prefill-decode pair (the decode could not get the prefill's KV), by pair."},

	// Go runtime (metrics.WriteProcessMetrics).
	"go_cgo_calls_count":                  {typeCounter, "Calls from Go to C made by the process."},
	"go_cpu_count":                        {typeGauge, "Logical CPUs usable by the process."},
	"go_gc_cpu_seconds_total":             {typeCounter, "CPU time spent by the garbage collector."},
	"go_gc_duration_seconds":              {typeSummary, "Stop-the-world pause durations of recent garbage collections."},
	"go_gc_forced_count":                  {typeCounter, "Garbage collections forced by the application."},
	"go_gc_mark_assist_cpu_seconds_total": {typeCounter, "CPU time goroutines spent assisting the garbage collector's marking."},
	"go_gc_pauses_seconds":                {typeHistogram, "Stop-the-world pause durations of garbage collections."},
	"go_gomaxprocs":                       {typeGauge, "GOMAXPROCS: threads that may run Go code at once."},
	"go_goroutines":                       {typeGauge, "Goroutines that currently exist."},
	"go_info":                             {typeGauge, "Go version the binary was built with; always 1."},
	"go_info_ext":                         {typeGauge, "Compiler, GOARCH, GOOS and GOROOT of the binary; always 1."},
	"go_memlimit_bytes":                   {typeGauge, "Go runtime soft memory limit (GOMEMLIMIT)."},
	"go_memstats_alloc_bytes":             {typeGauge, "Bytes of allocated heap objects."},
	"go_memstats_alloc_bytes_total":       {typeCounter, "Bytes allocated for heap objects, cumulative."},
	"go_memstats_buck_hash_sys_bytes":     {typeGauge, "Bytes of memory in profiling bucket hash tables."},
	"go_memstats_frees_total":             {typeCounter, "Heap objects freed, cumulative."},
	"go_memstats_gc_cpu_fraction":         {typeGauge, "Fraction of available CPU time used by the garbage collector since the process started."},
	"go_memstats_gc_sys_bytes":            {typeGauge, "Bytes of memory in garbage collection metadata."},
	"go_memstats_heap_alloc_bytes":        {typeGauge, "Bytes of allocated heap objects."},
	"go_memstats_heap_idle_bytes":         {typeGauge, "Bytes in idle (unused) heap spans."},
	"go_memstats_heap_inuse_bytes":        {typeGauge, "Bytes in in-use heap spans."},
	"go_memstats_heap_objects":            {typeGauge, "Allocated heap objects."},
	"go_memstats_heap_released_bytes":     {typeGauge, "Bytes of physical memory returned to the OS."},
	"go_memstats_heap_sys_bytes":          {typeGauge, "Bytes of heap memory obtained from the OS."},
	"go_memstats_last_gc_time_seconds":    {typeGauge, "Time the last garbage collection finished, in seconds since the Unix epoch."},
	"go_memstats_lookups_total":           {typeCounter, "Pointer lookups performed by the runtime, cumulative."},
	"go_memstats_mallocs_total":           {typeCounter, "Heap objects allocated, cumulative."},
	"go_memstats_mcache_inuse_bytes":      {typeGauge, "Bytes of allocated mcache structures."},
	"go_memstats_mcache_sys_bytes":        {typeGauge, "Bytes of memory obtained from the OS for mcache structures."},
	"go_memstats_mspan_inuse_bytes":       {typeGauge, "Bytes of allocated mspan structures."},
	"go_memstats_mspan_sys_bytes":         {typeGauge, "Bytes of memory obtained from the OS for mspan structures."},
	"go_memstats_next_gc_bytes":           {typeGauge, "Heap size target of the next garbage collection."},
	"go_memstats_other_sys_bytes":         {typeGauge, "Bytes of memory in miscellaneous off-heap runtime allocations."},
	"go_memstats_stack_inuse_bytes":       {typeGauge, "Bytes in stack spans."},
	"go_memstats_stack_sys_bytes":         {typeGauge, "Bytes of stack memory obtained from the OS."},
	"go_memstats_sys_bytes":               {typeGauge, "Bytes of memory obtained from the OS in total."},
	"go_mutex_wait_seconds_total":         {typeCounter, "Time goroutines spent blocked on a sync.Mutex or sync.RWMutex."},
	"go_scavenge_cpu_seconds_total":       {typeCounter, "CPU time spent returning unused memory to the OS."},
	"go_sched_latencies_seconds":          {typeHistogram, "Time goroutines spent runnable before running."},
	"go_threads":                          {typeGauge, "OS threads created."},
	// Process (metrics.WriteProcessMetrics, Linux /proc).
	"process_cgroup_cpu_throttled_seconds_total":    {typeCounter, "Time the process's cgroup was throttled by its CPU quota."},
	"process_cpu_seconds_system_total":              {typeCounter, "CPU time spent in the kernel on behalf of the process."},
	"process_cpu_seconds_total":                     {typeCounter, "CPU time spent by the process, user and system."},
	"process_cpu_seconds_user_total":                {typeCounter, "CPU time spent by the process in user mode."},
	"process_io_read_bytes_total":                   {typeCounter, "Bytes read by the process through read-like system calls."},
	"process_io_read_syscalls_total":                {typeCounter, "Read-like system calls made by the process."},
	"process_io_storage_read_bytes_total":           {typeCounter, "Bytes the process caused to be fetched from storage."},
	"process_io_storage_written_bytes_total":        {typeCounter, "Bytes the process caused to be sent to storage."},
	"process_io_write_syscalls_total":               {typeCounter, "Write-like system calls made by the process."},
	"process_io_written_bytes_total":                {typeCounter, "Bytes written by the process through write-like system calls."},
	"process_major_pagefaults_total":                {typeCounter, "Page faults of the process that needed a disk read."},
	"process_minor_pagefaults_total":                {typeCounter, "Page faults of the process served without a disk read."},
	"process_num_threads":                           {typeGauge, "OS threads of the process."},
	"process_pressure_cpu_stalled_seconds_total":    {typeCounter, "Time all non-idle tasks of the process's cgroup were stalled on CPU (PSI full)."},
	"process_pressure_cpu_waiting_seconds_total":    {typeCounter, "Time some tasks of the process's cgroup waited for CPU (PSI some)."},
	"process_pressure_io_stalled_seconds_total":     {typeCounter, "Time all non-idle tasks of the process's cgroup were stalled on I/O (PSI full)."},
	"process_pressure_io_waiting_seconds_total":     {typeCounter, "Time some tasks of the process's cgroup waited for I/O (PSI some)."},
	"process_pressure_memory_stalled_seconds_total": {typeCounter, "Time all non-idle tasks of the process's cgroup were stalled on memory (PSI full)."},
	"process_pressure_memory_waiting_seconds_total": {typeCounter, "Time some tasks of the process's cgroup waited for memory (PSI some)."},
	"process_resident_memory_anon_bytes":            {typeGauge, "Resident anonymous memory of the process."},
	"process_resident_memory_bytes":                 {typeGauge, "Resident memory of the process."},
	"process_resident_memory_file_bytes":            {typeGauge, "Resident file-backed memory of the process."},
	"process_resident_memory_peak_bytes":            {typeGauge, "Peak resident memory of the process."},
	"process_resident_memory_shared_bytes":          {typeGauge, "Resident shared memory of the process."},
	"process_start_time_seconds":                    {typeGauge, "Start time of the process, in seconds since the Unix epoch."},
	"process_virtual_memory_bytes":                  {typeGauge, "Virtual memory size of the process."},
	"process_virtual_memory_peak_bytes":             {typeGauge, "Peak virtual memory size of the process."},
}

// observeAdmission writes the admission gate's gauges at scrape time.
func (m *Metrics) observeAdmission(a *Admission) {
	if m == nil {
		return
	}
	m.AddWriter(func(w io.Writer) {
		metrics.WriteGaugeUint64(w, "pdlb_admission_in_flight", uint64(a.InFlight()))
		metrics.WriteGaugeUint64(w, "pdlb_admission_queued", uint64(a.Queued()))
		limit, queue := a.Limits()
		metrics.WriteGaugeUint64(w, "pdlb_admission_limit", uint64(limit))
		metrics.WriteGaugeUint64(w, "pdlb_admission_queue_size", uint64(queue))
	})
}

// observeStreams writes the count of streams being relayed at scrape time.
func (m *Metrics) observeStreams(active *atomic.Int64) {
	if m == nil {
		return
	}
	m.AddWriter(func(w io.Writer) {
		metrics.WriteGaugeUint64(w, "pdlb_streams_active", uint64(max(0, active.Load())))
	})
}
