package router

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"pdlb/config"
	"pdlb/proxy"
	"pdlb/proxy/proxytest"
)

func TestReadinessNeedsAPrefillAndADecode(t *testing.T) {
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	d := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d})
	if resp, body := proxytest.Get(t, l.URL+"/readiness"); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	l.pool.Backends(proxy.Prefill)[0].SetHealthy(false)
	resp, body := proxytest.Get(t, l.URL+"/readiness")
	if resp.StatusCode != 503 || !strings.Contains(body, "no prefill backend available") || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if resp, _ := proxytest.Get(t, l.URL+"/liveness"); resp.StatusCode != 200 {
		t.Fatal("liveness must not depend on backends")
	}
	l.pool.Backends(proxy.Prefill)[0].SetHealthy(true)
	l.router.draining.Store(true)
	if resp, body := proxytest.Get(t, l.URL+"/readiness"); resp.StatusCode != 503 || !strings.Contains(body, "shutting down") {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
}

func TestServerAPIKey(t *testing.T) {
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	d := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{"ok":1}`))
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d}, func(c *config.Config) { c.Server.APIKey = "s3cret" })
	if resp, body := proxytest.Post(t, l.URL+"/generate", `{"text":"hi"}`); resp.StatusCode != 401 || !strings.Contains(body, `"code":401`) {
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
	if resp, _ := proxytest.Get(t, l.URL+"/health"); resp.StatusCode != 200 {
		t.Fatal("/health must stay open for probes")
	}
	if d.Count() != 1 {
		t.Fatalf("unauthorized requests reached the decode: %d", d.Count())
	}
}

func TestShutdownLetsStreamsFinish(t *testing.T) {
	p := proxytest.NewEngine(t, sseEngine([]string{`{}`}, 0, false))
	d := proxytest.NewEngine(t, sseEngine([]string{`{"i":1}`, `{"i":2}`, `{"i":3}`, `{"i":4}`}, 100*time.Millisecond, false))
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d})
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
		done <- l.router.Shutdown(ctx)
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
