package router

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"pdlb"
	"pdlb/config"
	"pdlb/proxy"
	"pdlb/proxy/proxytest"
)

func TestRetryOnAnotherPairWithANewRoom(t *testing.T) {
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	bad := proxytest.NewEngine(t, proxytest.JSONAnswer(503, `{"error":"overloaded"}`))
	good := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{"ok":true}`))
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{bad, good}, func(c *config.Config) { c.Retry.MaxAttempts = 3 })
	for i := 0; i < 20; i++ {
		resp, body := proxytest.Post(t, l.URL+"/generate", `{"text":"hi"}`)
		if resp.StatusCode != 200 || body != `{"ok":true}` {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
	}
	if bad.Count() == 0 {
		t.Fatal("the failing decode was never picked; the test proves nothing")
	}
	// Each retry used a fresh room: the bad decode's rooms differ from the good one's.
	rooms := map[int64]bool{}
	for _, b := range append(bad.Bodies(), good.Bodies()...) {
		rooms[gjson.GetBytes(b, "bootstrap_room").Int()] = true
	}
	if len(rooms) != bad.Count()+good.Count() {
		t.Fatalf("rooms reused across attempts: %d distinct of %d", len(rooms), bad.Count()+good.Count())
	}
	_, metrics := proxytest.Get(t, l.URL+"/metrics")
	if !strings.Contains(metrics, `pdlb_retries_total{route="/generate"}`) {
		t.Fatal("retries not counted")
	}
}

func TestNoRetryOn500(t *testing.T) {
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	d := proxytest.NewEngine(t, proxytest.JSONAnswer(500, `{}`))
	d2 := proxytest.NewEngine(t, proxytest.JSONAnswer(500, `{}`))
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d, d2}, func(c *config.Config) { c.Retry.MaxAttempts = 3 })
	proxytest.Post(t, l.URL+"/generate", `{"text":"hi"}`)
	if n := d.Count() + d2.Count(); n != 1 {
		t.Fatalf("a 500 (the engine ran the request) was retried: %d attempts", n)
	}
}

func TestAdmissionRefusesBeyondTheQueue(t *testing.T) {
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	d := proxytest.NewEngine(t, func(ctx *fasthttp.RequestCtx) {
		time.Sleep(300 * time.Millisecond)
		ctx.SetBodyString(`{}`)
	})
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d}, func(c *config.Config) {
		c.Limits.MaxConcurrentRequests, c.Limits.QueueSize, c.Limits.QueueTimeout = 1, 0, time.Second
	})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); proxytest.Post(t, l.URL+"/generate", `{"text":"hi"}`) }()
	proxytest.WaitFor(time.Second, func() bool { return d.Count() == 1 })
	resp, body := proxytest.Post(t, l.URL+"/generate", `{"text":"hi"}`)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, `"code":429`) {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	wg.Wait()
}

// TestAllAttemptsOverloadedIs503: when every attempt met an engine's 503
// (overloaded: come back later), the client gets 503 with the engine's
// Retry-After, naming the backend, not a 502.
func TestAllAttemptsOverloadedIs503(t *testing.T) {
	overloaded := func(retryAfter string) fasthttp.RequestHandler {
		return func(ctx *fasthttp.RequestCtx) {
			if retryAfter != "" {
				ctx.Response.Header.Set("Retry-After", retryAfter)
			}
			proxytest.JSONAnswer(503, `{"error":"overloaded"}`)(ctx)
		}
	}
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	for _, c := range []struct{ engineRetryAfter, want string }{{"7", "7"}, {"", "1"}} {
		d1 := proxytest.NewEngine(t, overloaded(c.engineRetryAfter))
		d2 := proxytest.NewEngine(t, overloaded(c.engineRetryAfter))
		l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d1, d2}, func(c *config.Config) { c.Retry.MaxAttempts = 3 })
		resp, body := proxytest.Post(t, l.URL+"/generate", `{"text":"hi"}`)
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != c.want || !strings.Contains(body, "answered 503") ||
			!(strings.Contains(body, d1.URL) || strings.Contains(body, d2.URL)) {
			t.Fatalf("engine Retry-After %q: %d (Retry-After %q) %s", c.engineRetryAfter, resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
		if d1.Count() != 1 || d2.Count() != 1 {
			t.Fatalf("attempts %d and %d, want one on each decode", d1.Count(), d2.Count())
		}
	}
	// A 503 from the prefill counts the same (the decode answers later:
	// the prefill's failure comes before the decode's first byte).
	pOver := proxytest.NewEngine(t, overloaded("3"))
	d := proxytest.NewEngine(t, func(ctx *fasthttp.RequestCtx) {
		time.Sleep(300 * time.Millisecond)
		proxytest.JSONAnswer(200, `{}`)(ctx)
	})
	l := startLB(t, []*proxytest.Engine{pOver}, []*proxytest.Engine{d})
	if resp, body := proxytest.Post(t, l.URL+"/generate", `{"text":"hi"}`); resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "3" || !strings.Contains(body, "prefill "+pOver.URL) {
		t.Fatalf("prefill 503: %d %s", resp.StatusCode, body)
	}
}

// TestOverloadedThenBrokenIs502: one 503 among the attempts is not enough
// for a 503 answer when the last failure was of another kind.
func TestOverloadedThenBrokenIs502(t *testing.T) {
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	d1 := proxytest.NewEngine(t, proxytest.JSONAnswer(503, `{}`))
	d2 := proxytest.NewEngine(t, proxytest.JSONAnswer(502, `{}`))
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d1, d2}, func(c *config.Config) { c.Retry.MaxAttempts = 2 })
	if resp, body := proxytest.Post(t, l.URL+"/generate", `{"text":"hi"}`); resp.StatusCode != 502 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
}

// sleepGate is a clock whose Sleep reports each wait and then blocks until
// the test releases it or the wait is cancelled: retry backoff is tested
// without sleeping, and a backoff of an hour proves the cancellation.
type sleepGate struct {
	slept   chan time.Duration
	release chan struct{}
}

func newSleepGate() *sleepGate {
	return &sleepGate{slept: make(chan time.Duration, 8), release: make(chan struct{}, 8)}
}

func (g *sleepGate) clock() pdlb.Clock {
	return pdlb.Clock{Now: time.Now, Sleep: func(ctx context.Context, d time.Duration) error {
		g.slept <- d
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-g.release:
			return nil
		}
	}}
}

func (g *sleepGate) waitSleep(t *testing.T) time.Duration {
	t.Helper()
	select {
	case d := <-g.slept:
		return d
	case <-time.After(5 * time.Second):
		t.Fatal("no backoff started")
		return 0
	}
}

// hourBackoff retries 503s after a backoff of about an hour, within a
// request timeout of a day.
func hourBackoff(c *config.Config) {
	c.Retry = config.Retry{MaxAttempts: 3, Initial: time.Hour, Max: time.Hour}
	c.Timeouts.Request = 24 * time.Hour
}

// TestBackoffUsesTheClock: the wait between attempts comes from the
// injected clock, in [initial/2, initial], and the next attempt follows it.
func TestBackoffUsesTheClock(t *testing.T) {
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	bad := proxytest.NewEngine(t, proxytest.JSONAnswer(503, `{}`))
	good := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{"ok":1}`))
	g := newSleepGate()
	l := startLBWith(t, []*proxytest.Engine{p}, []*proxytest.Engine{bad}, testLog(t), g.clock(), hourBackoff)
	done := make(chan string, 1)
	go func() { _, body := proxytest.Post(t, l.URL+"/generate", `{"text":"hi"}`); done <- body }()
	if d := g.waitSleep(t); d < 30*time.Minute || d > time.Hour {
		t.Fatalf("backoff %v, want within [30m, 1h]", d)
	}
	// The only other decode joins while the first attempt's backoff runs.
	b, err := proxy.NewBackend(good.URL, proxy.Decode, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	l.pool.Add(b)
	g.release <- struct{}{}
	select {
	case body := <-done:
		if body != `{"ok":1}` || bad.Count() != 1 || good.Count() != 1 {
			t.Fatalf("after the backoff: %s (bad %d, good %d)", body, bad.Count(), good.Count())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no second attempt after the backoff")
	}
}

// TestBackoffEndsWhenTheClientLeaves: a client that disconnects during the
// backoff ends the request at once: no further attempt, logged as 499.
func TestBackoffEndsWhenTheClientLeaves(t *testing.T) {
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	d := proxytest.NewEngine(t, proxytest.JSONAnswer(503, `{}`))
	g := newSleepGate()
	logs := &proxytest.SyncBuffer{}
	l := startLBWith(t, []*proxytest.Engine{p}, []*proxytest.Engine{d}, zerolog.New(logs), g.clock(), hourBackoff)
	conn, err := net.Dial("tcp", strings.TrimPrefix(l.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	body := `{"text":"hi"}`
	fmt.Fprintf(conn, "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	g.waitSleep(t)
	conn.Close()
	if !proxytest.WaitFor(2*time.Second, func() bool { return strings.Contains(string(logs.Bytes()), `"status":499`) }) {
		t.Fatalf("the backoff did not end when the client left; log: %s", logs.Bytes())
	}
	if d.Count() != 1 {
		t.Fatalf("%d attempts, want 1", d.Count())
	}
}

// TestBackoffEndsAtShutdown: a shutdown during the backoff answers the
// request at once with what the attempts found.
func TestBackoffEndsAtShutdown(t *testing.T) {
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	d := proxytest.NewEngine(t, proxytest.JSONAnswer(503, `{}`))
	g := newSleepGate()
	l := startLBWith(t, []*proxytest.Engine{p}, []*proxytest.Engine{d}, testLog(t), g.clock(), hourBackoff)
	type answer struct {
		status int
		body   string
	}
	done := make(chan answer, 1)
	go func() {
		resp, body := proxytest.Post(t, l.URL+"/generate", `{"text":"hi"}`)
		done <- answer{resp.StatusCode, body}
	}()
	g.waitSleep(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	go l.router.Shutdown(ctx)
	select {
	case a := <-done:
		if a.status != 503 || d.Count() != 1 {
			t.Fatalf("%d %s after %d attempts", a.status, a.body, d.Count())
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the backoff did not end at shutdown")
	}
}
