package router

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"pdlb/config"
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
