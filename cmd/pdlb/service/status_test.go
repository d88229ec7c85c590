package service

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"pdlb"
	"pdlb/config"
	"pdlb/proxy"
	"pdlb/proxy/proxytest"
)

// statusLB is a whole pdlb with its admin listener, whose status sampler
// runs on a clock the test moves.
type statusLB struct {
	URL, Admin string
	svc        *Service
	clk        *fakeClock
}

// startStatusLB starts a Service in front of the engines with the admin
// listener on; its sampler takes one sample at start and then only when
// the test calls tick.
func startStatusLB(t *testing.T, prefills, decodes []*proxytest.Engine, opts ...lbOption) *statusLB {
	t.Helper()
	return startStatusLBClock(t, &fakeClock{now: time.Unix(1_000_000, 0)}, prefills, decodes, opts...)
}

// startStatusLBClock is startStatusLB with the sampler on clk, or on the
// system clock (a sample a second) when clk is nil.
func startStatusLBClock(t *testing.T, clk *fakeClock, prefills, decodes []*proxytest.Engine, opts ...lbOption) *statusLB {
	t.Helper()
	cfg := testConfig()
	for _, p := range prefills {
		cfg.Prefill = append(cfg.Prefill, config.Prefill{URL: p.URL})
	}
	for _, d := range decodes {
		cfg.Decode = append(cfg.Decode, config.Decode{URL: d.URL})
	}
	cfg.Admin = config.Admin{Host: "127.0.0.1", Port: proxytest.FreePort(t)}
	for _, o := range opts {
		o(&cfg)
	}
	svc, err := New(&cfg, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	if clk != nil {
		c := clk.clock()
		c.Sleep = func(ctx context.Context, _ time.Duration) error { <-ctx.Done(); return ctx.Err() }
		svc.status.sampler.clock = c
	}
	if err := svc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Shutdown(context.Background()) })
	l := &statusLB{URL: "http://" + svc.Addr(), Admin: "http://127.0.0.1:" + strconv.Itoa(cfg.Admin.Port), svc: svc, clk: clk}
	// The start's own sample, taken by the sampler's goroutine.
	if !proxytest.WaitFor(2*time.Second, func() bool { return l.samples() >= 1 }) {
		t.Fatal("the sampler took no sample at start")
	}
	return l
}

func (l *statusLB) samples() int {
	s := l.svc.status.sampler
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// tick moves the sampler's clock by d and takes a sample.
func (l *statusLB) tick(d time.Duration) {
	l.clk.advance(d)
	l.svc.status.sampler.sample()
}

// status fetches and decodes GET /status.json.
func (l *statusLB) status(t *testing.T, key string) statusJSON {
	t.Helper()
	st, body := l.admin(t, "GET", "/status.json", key)
	if st != 200 {
		t.Fatalf("GET /status.json: %d %s", st, body)
	}
	var s statusJSON
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatalf("GET /status.json: %v\n%s", err, body)
	}
	return s
}

// admin sends one admin request (answered in JSON) and returns the status
// and body.
func (l *statusLB) admin(t *testing.T, method, path, key string) (int, string) {
	t.Helper()
	return (&adminServer{URL: l.Admin}).do(t, method, path, "", key)
}

func backendOf(t *testing.T, s statusJSON, url string) statusBackend {
	t.Helper()
	for _, b := range s.Backends {
		if b.URL == url {
			return b
		}
	}
	t.Fatalf("no backend %s in %+v", url, s.Backends)
	return statusBackend{}
}

// TestStatusJSONFromRunningEngines: the status data follows requests
// through real engines: per-backend legs per second, error ratio and TTFT
// from the sampled counters, totals by status class, the failed requests
// with their IDs and causes, and the live state (breaker, in flight,
// registry) of every backend.
func TestStatusJSONFromRunningEngines(t *testing.T) {
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{"text":""}`))
	good := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{"text":"ok"}`))
	bad := proxytest.NewEngine(t, proxytest.JSONAnswer(500, `{"error":"out of memory"}`))
	l := startStatusLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{good, bad}, func(c *config.Config) {
		c.Policy.Prefill, c.Policy.Decode = "round_robin", "round_robin"
		c.Breaker = config.Breaker{Enabled: true, ConsecutiveFailures: 100, OpenTimeout: time.Minute, HalfOpenMaxRequests: 1}
	})

	s := l.status(t, "")
	if len(s.Backends) != 3 || s.RateWindowS != 10 || s.TTFTWindowS != 60 || len(s.Errors) != 0 {
		t.Fatalf("at start: %+v", s)
	}
	var failedIDs []string
	for i := range 8 {
		req, _ := http.NewRequest("POST", l.URL+"/generate", strings.NewReader(`{"text":"hi"}`))
		req.Header.Set("X-Request-ID", "status-test-"+strconv.Itoa(i))
		resp, body := do(t, req)
		switch resp.StatusCode {
		case 200:
		case 502:
			failedIDs = append(failedIDs, "status-test-"+strconv.Itoa(i))
		default:
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
	}
	if len(failedIDs) != 4 {
		t.Fatalf("%d requests failed, want 4 of 8 (round robin over a good and a bad decode)", len(failedIDs))
	}
	// The prefill's legs may still be settling (a prefill cut by its
	// decode's failure, or finishing after the decode answered).
	if !proxytest.WaitFor(2*time.Second, func() bool { return legs(l.svc.Metrics.Backend(proxy.Prefill, p.URL)) == 8 }) {
		t.Fatal("prefill legs still in flight")
	}
	l.tick(2 * time.Second)
	s = l.status(t, "")

	g, b, pf := backendOf(t, s, good.URL), backendOf(t, s, bad.URL), backendOf(t, s, p.URL)
	if g.ReqPerS != 2 || b.ReqPerS != 2 || pf.ReqPerS != 4 {
		t.Errorf("req/s good %v, bad %v, prefill %v; want 2, 2, 4 (4, 4, 8 legs in 2 s)", g.ReqPerS, b.ReqPerS, pf.ReqPerS)
	}
	if g.ErrorRate == nil || *g.ErrorRate != 0 || b.ErrorRate == nil || *b.ErrorRate != 1 {
		t.Errorf("error rate good %v, bad %v; want 0 and 1", deref(g.ErrorRate), deref(b.ErrorRate))
	}
	if g.TTFTP50S == nil || *g.TTFTP50S <= 0 || *g.TTFTP50S > 1 || g.TTFTP99S == nil || *g.TTFTP99S < *g.TTFTP50S {
		t.Errorf("good decode TTFT p50 %v p99 %v", deref(g.TTFTP50S), deref(g.TTFTP99S))
	}
	if b.TTFTP50S != nil {
		t.Errorf("the failing decode has a TTFT %v: failed legs are not answers", *b.TTFTP50S)
	}
	if len(g.ReqPerSHistory) != 1 || g.ReqPerSHistory[0] != 2 {
		t.Errorf("good decode history %v, want [2]", g.ReqPerSHistory)
	}
	if g.State != "serving" || !g.Healthy || g.Breaker != "closed" || g.InFlight != 0 || g.HalfOpenInS != nil || g.Registry != nil {
		t.Errorf("good decode %+v", g)
	}
	if pf.Registry != nil {
		t.Errorf("prefill registry %+v, want none (bootstrap.mode off)", pf.Registry)
	}
	if r := s.Totals.ReqPerS; r["2xx"] != 2 || r["5xx"] != 2 || r["4xx"] != 0 {
		t.Errorf("totals %v, want 2xx 2/s and 5xx 2/s", r)
	}
	if s.Totals.Admission.Limit != 0 || s.Totals.ActiveStreams != 0 {
		t.Errorf("totals %+v", s.Totals)
	}
	if len(s.Errors) != 4 {
		t.Fatalf("errors %+v, want the 4 failed requests", s.Errors)
	}
	for i, e := range s.Errors {
		want := failedIDs[len(failedIDs)-1-i] // newest first
		if e.RequestID != want || e.Status != 502 || e.Route != "/generate" || e.Decode != bad.URL ||
			!strings.Contains(e.Cause, bad.URL) || !strings.Contains(e.Cause, "out of memory") || e.Time.IsZero() {
			t.Errorf("error %d: %+v, want %s: 502 naming the bad decode and its answer", i, e, want)
		}
	}
	// Same counters as /metrics.
	_, metricsBody := proxytest.Get(t, l.URL+"/metrics")
	if line := `pdlb_backend_requests_total{role="decode",url="` + bad.URL + `",result="error"} 4`; !strings.Contains(metricsBody, line) {
		t.Errorf("/metrics lacks %s", line)
	}
}

// TestStatusBreakerOpen: an open breaker shows when it will let a probe
// through.
func TestStatusBreakerOpen(t *testing.T) {
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	bad := proxytest.NewEngine(t, proxytest.JSONAnswer(500, `{}`))
	l := startStatusLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{bad}, func(c *config.Config) {
		c.Breaker = config.Breaker{Enabled: true, ConsecutiveFailures: 2, OpenTimeout: time.Minute, HalfOpenMaxRequests: 1}
	})
	for range 2 {
		proxytest.Post(t, l.URL+"/generate", `{"text":"hi"}`)
	}
	b := backendOf(t, l.status(t, ""), bad.URL)
	if b.Breaker != "open" || b.HalfOpenInS == nil || *b.HalfOpenInS <= 50 || *b.HalfOpenInS > 60 {
		t.Fatalf("breaker %q, half-open in %v s; want open, about 60", b.Breaker, deref(b.HalfOpenInS))
	}
}

// TestStatusRoutes: the page is open, its data needs admin.api_key; both
// answer GET only; other admin paths are unchanged.
func TestStatusRoutes(t *testing.T) {
	d := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	l := startStatusLB(t, nil, []*proxytest.Engine{d}, func(c *config.Config) { c.Admin.APIKey = "s3cret" })

	req, _ := http.NewRequest("GET", l.Admin+"/", nil)
	resp, body := do(t, req)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") || !strings.Contains(body, "pdlb status") {
		t.Fatalf("GET / without a key: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'sha256-") || !strings.Contains(csp, "connect-src 'self'") {
		t.Errorf("CSP %q", csp)
	}
	for _, ext := range []string{"http://", "https://", "//"} {
		if strings.Contains(strings.ReplaceAll(body, "http://www.w3.org/2000/svg", ""), `"`+ext) {
			t.Errorf("the page refers to %s…: it must work offline", ext)
		}
	}
	if st, body := l.admin(t, "GET", "/status.json", ""); st != 401 || !strings.Contains(body, pdlb.ErrAuthentication) {
		t.Errorf("GET /status.json without the key: %d %s", st, body)
	}
	if st, _ := l.admin(t, "GET", "/status.json", "wrong"); st != 401 {
		t.Errorf("GET /status.json with a wrong key: %d", st)
	}
	if s := l.status(t, "s3cret"); len(s.Backends) != 1 {
		t.Errorf("with the key: %+v", s)
	}
	for _, c := range []struct {
		method, path, key string
		status            int
	}{
		{"POST", "/status.json", "s3cret", 405},
		{"DELETE", "/", "", 405},
		{"PUT", "/status.json", "", 405},
		{"GET", "/status", "s3cret", 404},
		{"GET", "/status.json/x", "s3cret", 404},
		{"GET", "/nope", "", 401},
	} {
		st, body := l.admin(t, c.method, c.path, c.key)
		var e proxytest.ErrorBody
		if st != c.status || json.Unmarshal([]byte(body), &e) != nil || e.Error.Code != c.status {
			t.Errorf("%s %s: %d %s, want %d in the error shape", c.method, c.path, st, body, c.status)
		}
	}
	req, _ = http.NewRequest("HEAD", l.Admin+"/", nil)
	if resp, _ := do(t, req); resp.StatusCode != 200 {
		t.Errorf("HEAD /: %d", resp.StatusCode)
	}
	req, _ = http.NewRequest("POST", l.Admin+"/status.json", nil)
	if resp, _ := do(t, req); resp.Header.Get("Allow") != fasthttp.MethodGet {
		t.Errorf("405 Allow %q, want GET", resp.Header.Get("Allow"))
	}
}

// TestStatusShowsDrains: a draining backend and a drained one are listed
// with their state; a drained one added back is listed once.
func TestStatusShowsDrains(t *testing.T) {
	d1 := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	d2 := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	l := startStatusLB(t, nil, []*proxytest.Engine{d1, d2})
	busy := l.svc.Pool.Find(d2.URL)
	ticket, _ := busy.Acquire()
	for _, u := range []string{d1.URL, d2.URL} {
		if st, body := l.admin(t, "DELETE", "/workers?url="+u, ""); st != 202 {
			t.Fatalf("drain %s: %d %s", u, st, body)
		}
	}
	if !proxytest.WaitFor(2*time.Second, func() bool { return len(l.svc.admin.Drained()) == 1 }) {
		t.Fatal("the idle backend's drain did not finish")
	}
	s := l.status(t, "")
	if st := backendOf(t, s, d1.URL).State; st != "drained" {
		t.Errorf("idle backend: %s, want drained", st)
	}
	if b := backendOf(t, s, d2.URL); b.State != "draining" || b.InFlight != 1 {
		t.Errorf("busy backend: %+v, want draining with 1 in flight", b)
	}
	ticket.Done(nil)
	if st, body := l.admin(t, "POST", "/workers/undrain?url="+d1.URL, ""); st != 201 {
		t.Fatalf("undrain: %d %s", st, body)
	}
	n := 0
	for _, b := range l.status(t, "").Backends {
		if b.URL == d1.URL {
			n++
			if b.State != "serving" {
				t.Errorf("undrained backend %s", b.State)
			}
		}
	}
	if n != 1 {
		t.Errorf("undrained backend listed %d times", n)
	}
}

// do sends req with the default client and reads the whole answer.
func do(t *testing.T, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	return proxytest.ReadAll(t, resp, err)
}

// TestStatusRegistryRanks: a prefill's row shows its registry namespace's
// ranks registered and expected, and readiness once all have registered.
func TestStatusRegistryRanks(t *testing.T) {
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	d := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	bootPort := proxytest.FreePort(t)
	l := startStatusLB(t, nil, []*proxytest.Engine{d}, func(c *config.Config) {
		c.Bootstrap = config.Default().Bootstrap
		c.Bootstrap.Mode, c.Bootstrap.ListenHost = "embedded", "127.0.0.1"
		c.Prefill = []config.Prefill{{URL: p.URL, BootstrapPort: &bootPort}}
	})
	registry := func() statusRegistry {
		r := backendOf(t, l.status(t, ""), p.URL).Registry
		if r == nil {
			t.Fatal("a prefill with an embedded registry has no registry in its row")
		}
		return *r
	}
	if r := registry(); r.Ready || r.Registered != 0 || r.Expected != 0 {
		t.Fatalf("before any rank: %+v", r)
	}
	for rank := range 2 {
		body := `{"attn_tp_size":2,"attn_tp_rank":` + strconv.Itoa(rank) + `,"attn_cp_size":1,"attn_cp_rank":0,` +
			`"attn_dp_size":1,"attn_dp_rank":0,"pp_size":1,"pp_rank":0,"system_dp_size":1,"system_dp_rank":0,` +
			`"rank_ip":"127.0.0.1","rank_port":` + strconv.Itoa(40000+rank) + `,"page_size":64,"kv_cache_dtype":"auto",` +
			`"load_balance_method":"follow_bootstrap_room"}`
		req, _ := http.NewRequest("PUT", "http://127.0.0.1:"+strconv.Itoa(bootPort)+"/route", strings.NewReader(body))
		if resp, b := do(t, req); resp.StatusCode != 200 {
			t.Fatalf("registering rank %d: %d %s", rank, resp.StatusCode, b)
		}
		want := statusRegistry{Ready: rank == 1, Registered: rank + 1, Expected: 2}
		if r := registry(); r != want {
			t.Fatalf("after rank %d: %+v, want %+v", rank, r, want)
		}
	}
}

// BenchmarkStatusJSON is one GET /status.json's work with 64 backends and a
// full ring: the snapshot and its encoding (a viewer asks once a second).
func BenchmarkStatusJSON(b *testing.B) {
	cfg := testConfig()
	for i := range 64 {
		cfg.Decode = append(cfg.Decode, config.Decode{URL: "http://10.0.0." + strconv.Itoa(i+1) + ":30000"})
	}
	cfg.Breaker = config.Breaker{Enabled: true, ConsecutiveFailures: 5, OpenTimeout: time.Minute, HalfOpenMaxRequests: 1}
	svc, err := New(&cfg, zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	for _, be := range svc.Pool.Backends(proxy.Decode) {
		svc.Metrics.LegDone(be, nil)
		svc.Metrics.LegAnswered(be, 20*time.Millisecond)
	}
	for range ringSamples {
		svc.status.sampler.sample()
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := json.Marshal(svc.status.snapshot()); err != nil {
			b.Fatal(err)
		}
	}
}
