package service

import (
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"pdlb/config"
	"pdlb/proxy"
	"pdlb/proxy/proxytest"
)

func TestApplySwapsBackendsWithoutDroppingInFlight(t *testing.T) {
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	slow := proxytest.NewEngine(t, func(ctx *fasthttp.RequestCtx) {
		time.Sleep(300 * time.Millisecond)
		ctx.SetBodyString(`{"from":"old"}`)
	})
	fresh := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{"from":"new"}`))
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{slow})
	inflight := make(chan string, 1)
	go func() {
		_, body := proxytest.Post(t, l.URL+"/generate", `{"text":"hi"}`)
		inflight <- body
	}()
	proxytest.WaitFor(time.Second, func() bool { return slow.Count() == 1 })
	next := l.svc.Config()
	cp := *next
	// A trailing slash is the same backend: the prefill must not be drained.
	cp.Prefill = []config.Prefill{{URL: p.URL + "/"}}
	cp.Decode = []config.Decode{{URL: fresh.URL}}
	cp.Timeouts.DecodeFirstByte = 2 * time.Second
	if err := l.svc.Apply(&cp); err != nil {
		t.Fatal(err)
	}
	if _, body := proxytest.Post(t, l.URL+"/generate", `{"text":"hi"}`); body != `{"from":"new"}` {
		t.Fatalf("new request went to %s", body)
	}
	if body := <-inflight; body != `{"from":"old"}` {
		t.Fatalf("in-flight request dropped by the reload: %s", body)
	}
	if got := l.pool.Backends(proxy.Decode); len(got) != 1 || got[0].URL != fresh.URL {
		t.Fatalf("decode pool after reload: %v", got)
	}
	if got := l.pool.Backends(proxy.Prefill); len(got) != 1 || got[0].URL != p.URL || got[0].Draining() {
		t.Fatalf("prefill pool after reload: %v", got)
	}
	if l.svc.Router.Settings().Timeout.DecodeFirstByte != 2*time.Second {
		t.Fatal("timeouts not reloaded")
	}
}
