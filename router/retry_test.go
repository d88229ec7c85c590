package router

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"pdlb/config"
)

func TestRetryOnAnotherPairWithANewRoom(t *testing.T) {
	p := newBackend(t, jsonAnswer(200, `{}`))
	bad := newBackend(t, jsonAnswer(503, `{"error":"overloaded"}`))
	good := newBackend(t, jsonAnswer(200, `{"ok":true}`))
	l := startLB(t, []*backend{p}, []*backend{bad, good}, func(c *config.Config) { c.Retry.MaxAttempts = 3 })
	for i := 0; i < 20; i++ {
		resp, body := post(t, l.URL+"/generate", `{"text":"hi"}`)
		if resp.StatusCode != 200 || body != `{"ok":true}` {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
	}
	if bad.count() == 0 {
		t.Fatal("the failing decode was never picked; the test proves nothing")
	}
	// Each retry used a fresh room: the bad decode's rooms differ from the good one's.
	rooms := map[int64]bool{}
	for _, b := range append(bad.allBodies(), good.allBodies()...) {
		rooms[gjson.GetBytes(b, "bootstrap_room").Int()] = true
	}
	if len(rooms) != bad.count()+good.count() {
		t.Fatalf("rooms reused across attempts: %d distinct of %d", len(rooms), bad.count()+good.count())
	}
	_, metrics := get(t, l.URL+"/metrics")
	if !strings.Contains(metrics, `pdlb_retries_total{route="/generate"}`) {
		t.Fatal("retries not counted")
	}
}

func TestNoRetryOn500(t *testing.T) {
	p := newBackend(t, jsonAnswer(200, `{}`))
	d := newBackend(t, jsonAnswer(500, `{}`))
	d2 := newBackend(t, jsonAnswer(500, `{}`))
	l := startLB(t, []*backend{p}, []*backend{d, d2}, func(c *config.Config) { c.Retry.MaxAttempts = 3 })
	post(t, l.URL+"/generate", `{"text":"hi"}`)
	if n := d.count() + d2.count(); n != 1 {
		t.Fatalf("a 500 (the engine ran the request) was retried: %d attempts", n)
	}
}

func TestAdmissionRefusesBeyondTheQueue(t *testing.T) {
	p := newBackend(t, jsonAnswer(200, `{}`))
	d := newBackend(t, func(ctx *fasthttp.RequestCtx) {
		time.Sleep(300 * time.Millisecond)
		ctx.SetBodyString(`{}`)
	})
	l := startLB(t, []*backend{p}, []*backend{d}, func(c *config.Config) {
		c.Limits.MaxConcurrentRequests, c.Limits.QueueSize, c.Limits.QueueTimeout = 1, 0, time.Second
	})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); post(t, l.URL+"/generate", `{"text":"hi"}`) }()
	waitFor(time.Second, func() bool { return d.count() == 1 })
	resp, body := post(t, l.URL+"/generate", `{"text":"hi"}`)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, `"code":429`) {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	wg.Wait()
}
