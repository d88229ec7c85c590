package service

import (
	"context"
	"net"
	"net/http"
	"strconv"
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

// TestShutdownStopsTakingRequestsAtOnce: SIGTERM's drain closes the
// listener at once, even while a health-check round waits on a backend
// that does not answer (it used to wait for the round first, up to
// health.timeout, while /readiness still answered 200).
func TestShutdownStopsTakingRequestsAtOnce(t *testing.T) {
	slowHealth := proxytest.NewEngine(t, func(ctx *fasthttp.RequestCtx) {
		if ctx.IsGet() {
			time.Sleep(1500 * time.Millisecond)
		}
		ctx.SetStatusCode(200)
	})
	d := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	cfg := testConfig()
	cfg.Prefill = []config.Prefill{{URL: slowHealth.URL}}
	cfg.Decode = []config.Decode{{URL: d.URL}}
	cfg.Health = config.Health{Interval: time.Hour, Timeout: 5 * time.Second, FailThreshold: 1, PassThreshold: 1}
	svc, err := New(&cfg, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(); err != nil {
		t.Fatal(err)
	}
	if !proxytest.WaitFor(time.Second, func() bool { return slowHealth.Count() > 0 }) {
		t.Fatal("no health-check round started")
	}
	done := make(chan struct{})
	start := time.Now()
	go func() { svc.Shutdown(context.Background()); close(done) }()
	if !proxytest.WaitFor(500*time.Millisecond, func() bool {
		c, err := net.Dial("tcp", svc.Addr())
		if err == nil {
			c.Close()
		}
		return err != nil
	}) {
		t.Fatalf("still accepting connections %v after the shutdown began", time.Since(start))
	}
	<-done
}

// TestFailedReloadChangesNothing: a reload that cannot be applied whole (a
// new prefill's registry port is taken) leaves the running configuration,
// the pool and the settings as they were, as its log line says.
func TestFailedReloadChangesNothing(t *testing.T) {
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	p2 := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	d := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	d2 := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	port, taken := proxytest.FreePort(t), proxytest.Listen(t, "127.0.0.1:0")
	defer taken.Close()
	takenPort := taken.Addr().(*net.TCPAddr).Port
	l := startLB(t, nil, []*proxytest.Engine{d}, func(c *config.Config) {
		c.Bootstrap = config.Default().Bootstrap
		c.Bootstrap.ListenHost = "127.0.0.1"
		c.Prefill = []config.Prefill{{URL: p.URL, BootstrapPort: &port}}
	})
	before := *l.svc.Config()
	next := before
	next.Decode = []config.Decode{{URL: d.URL}, {URL: d2.URL}}
	next.Prefill = []config.Prefill{{URL: p.URL, BootstrapPort: &port}, {URL: p2.URL, BootstrapPort: &takenPort}}
	next.Timeouts.DecodeIdle = time.Hour
	if err := l.svc.Apply(&next); err == nil || !strings.Contains(err.Error(), strconv.Itoa(takenPort)) {
		t.Fatalf("Apply = %v, want the bind failure", err)
	}
	if got := l.svc.Config(); len(got.Prefill) != 1 || len(got.Decode) != 1 || got.Timeouts != before.Timeouts {
		t.Fatalf("config in force after a failed reload: %+v", got)
	}
	if ps, ds := l.pool.Backends(proxy.Prefill), l.pool.Backends(proxy.Decode); len(ps) != 1 || len(ds) != 1 {
		t.Fatalf("pool after a failed reload: %d prefills, %d decodes", len(ps), len(ds))
	}
	if l.svc.Router.Settings().Timeout.DecodeIdle == time.Hour {
		t.Fatal("settings of a failed reload applied")
	}
	l.svc.reg.mu.Lock()
	_, kept := l.svc.reg.servers[takenPort]
	l.svc.reg.mu.Unlock()
	if kept {
		t.Fatal("the failed prefill's registry server remains")
	}
	// The running prefill's registry still answers.
	if resp, _ := proxytest.Get(t, "http://127.0.0.1:"+strconv.Itoa(port)+"/health"); resp.StatusCode != 200 {
		t.Fatalf("the running registry: %d", resp.StatusCode)
	}
}
