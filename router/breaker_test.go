package router

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"
	"github.com/valyala/fasthttp"

	"pdlb/config"
	"pdlb/proxy"
	"pdlb/proxy/proxytest"
)

func withBreaker(consecutive uint32, open time.Duration, probes uint32) lbOption {
	return func(c *config.Config) {
		c.Breaker = config.Breaker{Enabled: true, ConsecutiveFailures: consecutive, OpenTimeout: open, HalfOpenMaxRequests: probes, Window: time.Minute}
	}
}

func decodeBreaker(t *testing.T, l *lb) *proxy.Breaker {
	t.Helper()
	return l.pool.Backends(proxy.Decode)[0].Breaker()
}

func TestBreakerOpensOn5xxAndFailsFast(t *testing.T) {
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	d := proxytest.NewEngine(t, proxytest.JSONAnswer(500, `{"error":"engine crashed"}`))
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d}, withBreaker(3, time.Minute, 1))
	for i := 0; i < 3; i++ {
		if resp, body := proxytest.Post(t, l.URL+"/generate", `{"text":"hi"}`); resp.StatusCode != 502 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
	}
	if st := decodeBreaker(t, l).State(); st != gobreaker.StateOpen {
		t.Fatalf("breaker %v after 3 consecutive 500s", st)
	}
	before := d.Count() + p.Count()
	start := time.Now()
	resp, body := proxytest.Post(t, l.URL+"/generate", `{"text":"hi"}`)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, "no decode backend available") {
		t.Fatalf("got %d %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if el := time.Since(start); el > 100*time.Millisecond {
		t.Errorf("503 took %v", el)
	}
	if d.Count()+p.Count() != before {
		t.Fatal("a backend was contacted while every decode breaker was open")
	}
}

func TestBreakerIgnores4xx(t *testing.T) {
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	d := proxytest.NewEngine(t, proxytest.JSONAnswer(400, `{"error":"prompt too long"}`))
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d}, withBreaker(2, time.Minute, 1))
	for i := 0; i < 10; i++ {
		if resp, _ := proxytest.Post(t, l.URL+"/generate", `{"text":"hi"}`); resp.StatusCode != 400 {
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
	}
	if st := decodeBreaker(t, l).State(); st != gobreaker.StateClosed {
		t.Fatalf("breaker %v after client errors", st)
	}
}

func TestBreakerHalfOpenAdmitsBoundedProbes(t *testing.T) {
	var failing atomic.Bool
	failing.Store(true)
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	d := proxytest.NewEngine(t, func(ctx *fasthttp.RequestCtx) {
		if failing.Load() {
			ctx.SetStatusCode(500)
			return
		}
		time.Sleep(300 * time.Millisecond) // the probe is slow, so the others arrive while it runs
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"ok":true}`)
	})
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d}, withBreaker(1, 100*time.Millisecond, 1))
	proxytest.Post(t, l.URL+"/generate", `{"text":"hi"}`)
	if decodeBreaker(t, l).State() != gobreaker.StateOpen {
		t.Fatal("breaker not open")
	}
	failing.Store(false)
	time.Sleep(150 * time.Millisecond) // past the open timeout
	before := d.Count()
	var wg sync.WaitGroup
	var ok, refused atomic.Int32
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, _ := proxytest.Post(t, l.URL+"/generate", `{"text":"hi"}`)
			switch resp.StatusCode {
			case 200:
				ok.Add(1)
			case 503:
				refused.Add(1)
			}
		}()
		time.Sleep(20 * time.Millisecond)
	}
	wg.Wait()
	if got := d.Count() - before; got != 1 || ok.Load() != 1 || refused.Load() != 3 {
		t.Fatalf("half-open let %d requests reach the decode (ok %d, refused %d), want 1 probe", got, ok.Load(), refused.Load())
	}
	if st := decodeBreaker(t, l).State(); st != gobreaker.StateClosed {
		t.Fatalf("breaker %v after a successful probe", st)
	}
}

func TestMetricsExposeRequestsAndBreakers(t *testing.T) {
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	d := proxytest.NewEngine(t, proxytest.JSONAnswer(500, `{}`))
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d}, withBreaker(1, time.Minute, 1))
	proxytest.Post(t, l.URL+"/generate", `{"text":"hi"}`)
	proxytest.Post(t, l.URL+"/generate", `{"text":"hi"}`)
	_, body := proxytest.Get(t, l.URL+"/metrics")
	for _, want := range []string{
		`pdlb_requests_total{route="/generate",status="502"} 1`,
		`pdlb_requests_total{route="/generate",status="503"} 1`,
		`pdlb_breaker_state{role="decode",url="` + d.URL + `"} 2`,
		`pdlb_breaker_transitions_total{backend="decode ` + d.URL + `",from="closed",to="open"} 1`,
		`pdlb_backend_selected_total{role="decode",url="` + d.URL + `"} 1`,
		`pdlb_request_duration_seconds_bucket{route="/generate",le="+Inf"} 2`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestRefusedRequestsDoNotCloseAHalfOpenBreaker: a request refused before
// any backend was contacted (here: no decode available) must not count as
// the half-open prefill's successful probe.
func TestRefusedRequestsDoNotCloseAHalfOpenBreaker(t *testing.T) {
	var failing atomic.Bool
	failing.Store(true)
	p := proxytest.NewEngine(t, func(ctx *fasthttp.RequestCtx) {
		if failing.Load() {
			ctx.SetStatusCode(500)
			return
		}
		ctx.SetBodyString(`{}`)
	})
	d := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d}, withBreaker(1, 100*time.Millisecond, 1))
	proxytest.Post(t, l.URL+"/generate", `{"text":"hi"}`)
	pb := l.pool.Backends(proxy.Prefill)[0]
	// The prefill leg's outcome may land just after the decode's answer.
	if !proxytest.WaitFor(time.Second, func() bool { return pb.Breaker().State() == gobreaker.StateOpen }) {
		t.Fatal("prefill breaker not open")
	}
	time.Sleep(150 * time.Millisecond)
	// No decode is available: the prefill is admitted as the half-open probe,
	// then the request is refused without contacting it.
	l.pool.Backends(proxy.Decode)[0].SetHealthy(false)
	if resp, _ := proxytest.Post(t, l.URL+"/generate", `{"text":"hi"}`); resp.StatusCode != 503 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if st := pb.Breaker().State(); st == gobreaker.StateClosed {
		t.Fatal("a refused request closed the half-open breaker without a probe")
	}
	if n := pb.InFlight(); n != 0 {
		t.Fatalf("in flight %d after a refusal", n)
	}
}
