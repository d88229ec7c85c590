package proxy

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
	"go.uber.org/goleak"

	"pdlb/config"
	"pdlb/proxy/proxytest"
)

// healthEngine is a loopback engine whose /health status the test sets.
type healthEngine struct {
	URL    string
	status atomic.Int32
	hits   atomic.Int32
	srv    *fasthttp.Server
}

func newHealthEngine(t *testing.T, status int) *healthEngine {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &healthEngine{URL: "http://" + ln.Addr().String()}
	e.status.Store(int32(status))
	e.srv = &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			if string(ctx.Path()) != "/health" || !ctx.IsGet() {
				ctx.SetStatusCode(fasthttp.StatusNotFound)
				return
			}
			e.hits.Add(1)
			ctx.SetStatusCode(int(e.status.Load()))
		},
		CloseOnShutdown: true,
	}
	go e.srv.Serve(ln)
	t.Cleanup(func() { e.srv.Shutdown() })
	return e
}

// closedPortURL returns an address nothing listens on.
func closedPortURL(t *testing.T) string {
	t.Helper()
	return "http://" + proxytest.ClosedAddr(t)
}

func mustBackend(t testing.TB, url string, role Role) *Backend {
	t.Helper()
	b, err := NewBackend(url, role, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

func testHealth() config.Health {
	return config.Health{Interval: time.Hour, Timeout: time.Second, FailThreshold: 3, PassThreshold: 2}
}

func TestHealthThresholds(t *testing.T) {
	eng := newHealthEngine(t, 500)
	pool := NewPool(nil)
	b := mustBackend(t, eng.URL, Decode)
	pool.Add(b)
	h := NewHealthChecker(pool, testHealth(), zerolog.New(io.Discard))

	// Unhealthy after exactly FailThreshold failing rounds, not before.
	for round := 1; round <= 3; round++ {
		if !b.Healthy() || !pool.Available(b) {
			t.Fatalf("before round %d: backend already unhealthy", round)
		}
		h.CheckOnce()
	}
	if b.Healthy() || pool.Available(b) {
		t.Fatal("after 3 failing rounds: backend still healthy/available")
	}
	if got := eng.hits.Load(); got != 3 {
		t.Fatalf("engine saw %d checks, want 3", got)
	}

	// Healthy again after exactly PassThreshold passing rounds.
	eng.status.Store(200)
	h.CheckOnce()
	if b.Healthy() {
		t.Fatal("healthy after 1 passing round, want 2")
	}
	h.CheckOnce()
	if !b.Healthy() || !pool.Available(b) {
		t.Fatal("after 2 passing rounds: backend not healthy/available")
	}
}

func TestHealthStreakResets(t *testing.T) {
	eng := newHealthEngine(t, 500)
	pool := NewPool(nil)
	b := mustBackend(t, eng.URL, Prefill)
	pool.Add(b)
	h := NewHealthChecker(pool, testHealth(), zerolog.New(io.Discard))

	// fail, fail, pass, fail, fail: never three in a row.
	for _, st := range []int{500, 500, 200, 503, 404} {
		eng.status.Store(int32(st))
		h.CheckOnce()
	}
	if !b.Healthy() {
		t.Fatal("a passing probe did not reset the failure streak")
	}
	h.CheckOnce() // third failure in a row (404 is not 200)
	if b.Healthy() {
		t.Fatal("non-200 answers did not count as failures")
	}
}

func TestHealthClosedPortFails(t *testing.T) {
	pool := NewPool(nil)
	b := mustBackend(t, closedPortURL(t), Decode)
	pool.Add(b)
	cfg := testHealth()
	cfg.FailThreshold = 1
	h := NewHealthChecker(pool, cfg, zerolog.New(io.Discard))
	var results []bool
	h.OnResult = func(got *Backend, ok bool) {
		if got != b {
			t.Errorf("OnResult for %s, want %s", got.URL, b.URL)
		}
		results = append(results, ok) // one backend: no concurrent calls
	}
	h.CheckOnce()
	if b.Healthy() || pool.Available(b) {
		t.Fatal("backend on a closed port still healthy")
	}
	if len(results) != 1 || results[0] {
		t.Fatalf("OnResult got %v, want [false]", results)
	}
}

func TestHealthFollowsPool(t *testing.T) {
	bad := newHealthEngine(t, 500)
	good := newHealthEngine(t, 200)
	pool := NewPool(nil)
	cfg := testHealth()
	cfg.FailThreshold = 1
	h := NewHealthChecker(pool, cfg, zerolog.New(io.Discard))

	h.CheckOnce() // empty pool: nothing to do, nothing to break
	pb := mustBackend(t, bad.URL, Prefill)
	db := mustBackend(t, good.URL, Decode)
	pool.Add(pb)
	pool.Add(db)
	h.CheckOnce()
	if pb.Healthy() || !db.Healthy() {
		t.Fatalf("after adding: prefill healthy=%v decode healthy=%v, want false/true", pb.Healthy(), db.Healthy())
	}

	pool.Remove(pb)
	h.CheckOnce()
	if got := bad.hits.Load(); got != 1 {
		t.Fatalf("removed backend was checked %d times, want 1", got)
	}
	h.mu.Lock()
	n := len(h.streaks)
	h.mu.Unlock()
	if n != 1 {
		t.Fatalf("checker remembers %d backends, want 1 (removed one forgotten)", n)
	}
}

func TestHealthStartStop(t *testing.T) {
	// Earlier tests' servers are still winding down (IgnoreCurrent), and
	// fasthttp's own cleaners are not the checker's.
	defer goleak.VerifyNone(t, append(proxytest.IgnoredGoroutines(), goleak.IgnoreCurrent())...)
	// net/http's test server, unlike fasthttp's, leaves no housekeeping
	// goroutine behind once closed, so any leak left is the checker's.
	eng := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer eng.Close() // before VerifyNone; t.Cleanup would run after it
	pool := NewPool(nil)
	b := mustBackend(t, eng.URL, Decode)
	defer b.Close()
	pool.Add(b)

	h := NewHealthChecker(pool, testHealth(), zerolog.New(io.Discard))
	ticks := make(chan time.Time)
	stopped := make(chan struct{})
	h.newTicker = func(d time.Duration) (<-chan time.Time, func()) {
		if d != time.Hour {
			t.Errorf("ticker interval %v, want the configured 1h", d)
		}
		return ticks, func() { close(stopped) }
	}
	results := make(chan bool, 8)
	h.OnResult = func(_ *Backend, ok bool) { results <- ok }

	h.Start()
	h.Start() // a second Start must not start a second loop
	<-results // the immediate first round
	ticks <- time.Now()
	<-results
	h.Stop()
	h.Stop()
	select {
	case <-stopped:
	default:
		t.Fatal("Stop did not stop the ticker")
	}
	if len(results) != 0 {
		t.Fatalf("%d extra rounds ran", len(results))
	}
}

func TestHealthDisabled(t *testing.T) {
	pool := NewPool(nil)
	cfg := testHealth()
	cfg.Interval = 0
	h := NewHealthChecker(pool, cfg, zerolog.New(io.Discard))
	h.newTicker = func(time.Duration) (<-chan time.Time, func()) {
		t.Error("interval 0 started a ticker")
		return nil, func() {}
	}
	h.Start()
	h.Stop()
}

// TestHealthCheckIPv6Backend: an engine on an IPv6 address is probed (the
// health checker dialled IPv4 only, so it stayed unhealthy forever).
func TestHealthCheckIPv6Backend(t *testing.T) {
	eng := proxytest.NewEngineOn(t, proxytest.ListenIPv6(t), proxytest.JSONAnswer(200, `{}`))
	if !strings.HasPrefix(eng.URL, "http://[::1]:") {
		t.Fatalf("engine URL %s", eng.URL)
	}
	pool := NewPool(nil)
	b := mustBackend(t, eng.URL, Decode)
	b.SetHealthy(false)
	pool.Add(b)
	h := NewHealthChecker(pool, testHealth(), zerolog.New(io.Discard))
	var causes []string
	h.OnResult = func(_ *Backend, ok bool) {
		if !ok {
			causes = append(causes, "failed")
		}
	}
	h.CheckOnce()
	h.CheckOnce()
	if !b.Healthy() || len(causes) > 0 || eng.Count() != 2 {
		t.Fatalf("IPv6 engine: healthy=%v, %d failed checks, %d reached it", b.Healthy(), len(causes), eng.Count())
	}
}
