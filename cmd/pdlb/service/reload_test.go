package service

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
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

// TestReloadKeepsStartupOnlyKeys: keys read only at start (listeners and
// their limits, the registry's write rules) keep their running values on a
// reload, which says so, while the rest applies.
func TestReloadKeepsStartupOnlyKeys(t *testing.T) {
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	d := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	logs := &proxytest.SyncBuffer{}
	cfg := testConfig()
	cfg.Prefill = []config.Prefill{{URL: p.URL}}
	cfg.Decode = []config.Decode{{URL: d.URL}}
	svc := startService(t, &cfg, zerolog.New(logs))
	next := *svc.Config()
	next.Limits.MaxBodyBytes = 1 << 10
	next.Bootstrap.AuthToken = "new"
	next.Bootstrap.AllowedSources = []string{"10.0.0.0/8"}
	next.Server.APIKey = "k"             // applies
	next.Timeouts.DecodeIdle = time.Hour // applies
	if err := svc.Apply(&next); err != nil {
		t.Fatal(err)
	}
	got := svc.Config()
	if got.Limits.MaxBodyBytes != 1<<20 || got.Bootstrap.AuthToken != "" || got.Bootstrap.AllowedSources != nil {
		t.Fatalf("startup-only keys changed by a reload: %+v %+v", got.Limits, got.Bootstrap)
	}
	if got.Server.APIKey != "k" || svc.Router.Settings().Timeout.DecodeIdle != time.Hour {
		t.Fatal("reloadable keys not applied")
	}
	if !strings.Contains(string(logs.Bytes()), `"keys":["limits.max_body_bytes","bootstrap.auth_token","bootstrap.allowed_sources"]`) {
		t.Fatalf("reload did not name the kept keys: %s", logs.Bytes())
	}
	// The body limit in force is still the first one.
	req, _ := http.NewRequest(http.MethodPost, "http://"+svc.Addr()+"/generate", strings.NewReader(`{"text":"`+strings.Repeat("x", 4<<10)+`"}`))
	req.Header.Set("Authorization", "Bearer k")
	resp, err := http.DefaultClient.Do(req)
	if resp, body := proxytest.ReadAll(t, resp, err); resp.StatusCode != 200 {
		t.Fatalf("a 4 KiB body after the reload: %d %s (the body limit in force is the first one)", resp.StatusCode, body)
	}
}
