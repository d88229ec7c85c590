package router

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"pdlb/config"
	"pdlb/proxy"
)

func TestReadinessNeedsAPrefillAndADecode(t *testing.T) {
	p := newBackend(t, jsonAnswer(200, `{}`))
	d := newBackend(t, jsonAnswer(200, `{}`))
	l := startLB(t, []*backend{p}, []*backend{d})
	if resp, body := get(t, l.URL+"/readiness"); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	l.pool.Backends(proxy.Prefill)[0].SetHealthy(false)
	resp, body := get(t, l.URL+"/readiness")
	if resp.StatusCode != 503 || !strings.Contains(body, "no prefill backend available") || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if resp, _ := get(t, l.URL+"/liveness"); resp.StatusCode != 200 {
		t.Fatal("liveness must not depend on backends")
	}
	l.pool.Backends(proxy.Prefill)[0].SetHealthy(true)
	l.router.SetDraining(true)
	if resp, body := get(t, l.URL+"/readiness"); resp.StatusCode != 503 || !strings.Contains(body, "shutting down") {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
}

func TestServerAPIKey(t *testing.T) {
	p := newBackend(t, jsonAnswer(200, `{}`))
	d := newBackend(t, jsonAnswer(200, `{"ok":1}`))
	l := startLB(t, []*backend{p}, []*backend{d}, func(c *config.Config) { c.Server.APIKey = "s3cret" })
	if resp, body := post(t, l.URL+"/generate", `{"text":"hi"}`); resp.StatusCode != 401 || !strings.Contains(body, `"code":401`) {
		t.Fatalf("no key: %d %s", resp.StatusCode, body)
	}
	req, _ := http.NewRequest("POST", l.URL+"/generate", strings.NewReader(`{"text":"hi"}`))
	req.Header.Set("Authorization", "Bearer wrong")
	if resp, _ := http.DefaultClient.Do(req); resp.StatusCode != 401 {
		t.Fatalf("wrong key: %d", resp.StatusCode)
	} else {
		resp.Body.Close()
	}
	req, _ = http.NewRequest("POST", l.URL+"/generate", strings.NewReader(`{"text":"hi"}`))
	req.Header.Set("Authorization", "Bearer s3cret")
	if resp, _ := http.DefaultClient.Do(req); resp.StatusCode != 200 {
		t.Fatalf("right key: %d", resp.StatusCode)
	} else {
		resp.Body.Close()
	}
	if resp, _ := get(t, l.URL+"/health"); resp.StatusCode != 200 {
		t.Fatal("/health must stay open for probes")
	}
	if d.count() != 1 {
		t.Fatalf("unauthorized requests reached the decode: %d", d.count())
	}
}

func TestShutdownLetsStreamsFinish(t *testing.T) {
	p := newBackend(t, sseEngine([]string{`{}`}, 0, false))
	d := newBackend(t, sseEngine([]string{`{"i":1}`, `{"i":2}`, `{"i":3}`, `{"i":4}`}, 100*time.Millisecond, false))
	l := startLB(t, []*backend{p}, []*backend{d})
	resp, err := http.Post(l.URL+"/generate", "application/json", strings.NewReader(`{"text":"hi","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	first, _ := r.ReadString('\n')
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done <- l.svc.Shutdown(ctx)
	}()
	var rest strings.Builder
	for {
		line, err := r.ReadString('\n')
		rest.WriteString(line)
		if err != nil {
			break
		}
	}
	if !strings.Contains(first, `{"i":1}`) || !strings.Contains(rest.String(), `{"i":4}`) || !strings.Contains(rest.String(), "[DONE]") {
		t.Fatalf("stream cut by shutdown: %q %q", first, rest.String())
	}
	if err := <-done; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if _, err := http.Post(l.URL+"/generate", "application/json", strings.NewReader(`{}`)); err == nil {
		t.Fatal("new connections still accepted after shutdown")
	}
}

func TestApplySwapsBackendsWithoutDroppingInFlight(t *testing.T) {
	p := newBackend(t, jsonAnswer(200, `{}`))
	slow := newBackend(t, func(ctx *fasthttp.RequestCtx) {
		time.Sleep(300 * time.Millisecond)
		ctx.SetBodyString(`{"from":"old"}`)
	})
	fresh := newBackend(t, jsonAnswer(200, `{"from":"new"}`))
	l := startLB(t, []*backend{p}, []*backend{slow})
	inflight := make(chan string, 1)
	go func() {
		_, body := post(t, l.URL+"/generate", `{"text":"hi"}`)
		inflight <- body
	}()
	waitFor(time.Second, func() bool { return slow.count() == 1 })
	next := l.svc.Config()
	cp := *next
	// A trailing slash is the same backend: the prefill must not be drained.
	cp.Prefill = []config.Prefill{{URL: p.URL + "/"}}
	cp.Decode = []config.Decode{{URL: fresh.URL}}
	cp.Timeouts.DecodeFirstByte = 2 * time.Second
	if err := l.svc.Apply(&cp); err != nil {
		t.Fatal(err)
	}
	if _, body := post(t, l.URL+"/generate", `{"text":"hi"}`); body != `{"from":"new"}` {
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
	if l.router.proxy.Timeouts().DecodeFirstByte != 2*time.Second {
		t.Fatal("timeouts not reloaded")
	}
}
