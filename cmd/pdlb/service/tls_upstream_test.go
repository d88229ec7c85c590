package service

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"pdlb/config"
	"pdlb/proxy/proxytest"
)

// engineAnswer answers a streamed request with three events and [DONE],
// any other with JSON.
func engineAnswer(ctx *fasthttp.RequestCtx) {
	if bytes.Contains(ctx.PostBody(), []byte(`"stream":true`)) {
		sseAnswer(`{"text":"a"}`, `{"text":"ab"}`, `{"text":"abc"}`)(ctx)
		return
	}
	proxytest.JSONAnswer(200, `{"text":"over TLS"}`)(ctx)
}

// httpsLB starts a pdlb in front of one prefill and one decode, logging
// JSON into logs, with health checks every few milliseconds so that they
// dial the engines too.
func httpsLB(t *testing.T, logs *proxytest.SyncBuffer, prefill, decode *proxytest.Engine, up config.UpstreamTLS, opts ...lbOption) *Service {
	t.Helper()
	cfg := testConfig()
	cfg.Prefill = []config.Prefill{{URL: prefill.URL}}
	cfg.Decode = []config.Decode{{URL: decode.URL}}
	cfg.UpstreamTLS = up
	cfg.Health = config.Health{Interval: 20 * time.Millisecond, Timeout: time.Second, FailThreshold: 1000, PassThreshold: 1}
	for _, o := range opts {
		o(&cfg)
	}
	return startService(t, &cfg, zerolog.New(logs))
}

func post(t *testing.T, svc *Service, body string) (*http.Response, string) {
	t.Helper()
	c := &http.Client{Timeout: 20 * time.Second}
	resp, err := c.Post("http://"+svc.Addr()+"/generate", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestHTTPSBackendsEndToEnd: engines at https:// that require pdlb's
// client certificate (mTLS to engines) serve a JSON request and an SSE
// stream through pdlb, and the health checks reach them over TLS too.
func TestHTTPSBackendsEndToEnd(t *testing.T) {
	dir := t.TempDir()
	ca := proxytest.NewCA(t, "engines CA")
	pdlbCA := proxytest.NewCA(t, "pdlb clients CA")
	engineCert := ca.Issue(t, "engine", proxytest.CertOptions{})
	pdlbCert, pdlbKey := pdlbCA.Issue(t, "pdlb", proxytest.CertOptions{Client: true}).Write(t, dir, "pdlb")
	p := proxytest.NewTLSEngine(t, engineCert.ServerConfig(pdlbCA), engineAnswer)
	d := proxytest.NewTLSEngine(t, engineCert.ServerConfig(pdlbCA), engineAnswer)
	logs := &proxytest.SyncBuffer{}
	svc := httpsLB(t, logs, p, d, config.UpstreamTLS{CAFile: ca.WriteCA(t, dir, "ca"), CertFile: pdlbCert, KeyFile: pdlbKey})

	resp, body := post(t, svc, `{"text":"hi"}`)
	if resp.StatusCode != 200 || body != `{"text":"over TLS"}` {
		t.Fatalf("JSON through https engines: %d %q", resp.StatusCode, body)
	}
	// A body larger than a TLS record (16 KiB) arrives whole.
	long := strings.Repeat("word ", 60<<10)
	if resp, body := post(t, svc, `{"text":"`+long+`"}`); resp.StatusCode != 200 || !slices.ContainsFunc(d.Bodies(), func(b []byte) bool { return bytes.Contains(b, []byte(long)) }) {
		t.Fatalf("a 300 KiB prompt through https engines: %d %q; the decode did not get it whole", resp.StatusCode, body)
	}
	resp, body = post(t, svc, `{"text":"hi","stream":true}`)
	want := "data: {\"text\":\"a\"}\n\ndata: {\"text\":\"ab\"}\n\ndata: {\"text\":\"abc\"}\n\ndata: [DONE]\n\n"
	if resp.StatusCode != 200 || body != want {
		t.Fatalf("stream through https engines: %d %q, want %q", resp.StatusCode, body, want)
	}
	if !proxytest.WaitFor(5*time.Second, func() bool { return d.LastPath() == "/health" && p.LastPath() == "/health" }) {
		t.Fatalf("no health check reached the engines over TLS (last paths %q, %q); log:\n%s", p.LastPath(), d.LastPath(), logs.Bytes())
	}
	if bytes.Contains(logs.Bytes(), []byte("health check failed")) {
		t.Fatalf("a health check over TLS failed:\n%s", logs.Bytes())
	}
}

// TestUpstreamHandshakeFailures: an engine whose certificate another CA
// signed, one whose certificate expired, and one that requires a client
// certificate pdlb does not have each fail the request with 502 naming
// the backend and the cause, a request log line saying the same, and a
// health-check line naming the TLS handshake.
func TestUpstreamHandshakeFailures(t *testing.T) {
	dir := t.TempDir()
	ca := proxytest.NewCA(t, "engines CA")
	caFile := ca.WriteCA(t, dir, "ca")
	for _, tc := range []struct {
		name   string
		engine *tlsEngine
		cause  string
	}{
		{"another CA", &tlsEngine{cert: proxytest.NewCA(t, "stranger CA").Issue(t, "engine", proxytest.CertOptions{})},
			"TLS handshake: tls: failed to verify certificate: x509: certificate signed by unknown authority"},
		{"expired", &tlsEngine{cert: ca.Issue(t, "engine", proxytest.CertOptions{
			NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour)})},
			"TLS handshake: tls: failed to verify certificate: x509: certificate has expired or is not yet valid"},
		{"no client certificate", &tlsEngine{cert: ca.Issue(t, "engine", proxytest.CertOptions{}), clients: ca},
			"TLS handshake: remote error: tls: certificate required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := proxytest.NewEngine(t, engineAnswer)
			d := proxytest.NewTLSEngine(t, tc.engine.cert.ServerConfig(tc.engine.clients), engineAnswer)
			logs := &proxytest.SyncBuffer{}
			svc := httpsLB(t, logs, p, d, config.UpstreamTLS{CAFile: caFile}, func(c *config.Config) { c.Health = config.Health{} })

			resp, body := post(t, svc, `{"text":"hi"}`)
			msg := "decode " + d.URL + " connect: " + tc.cause
			if resp.StatusCode != 502 || !strings.Contains(body, msg) {
				t.Fatalf("answer %d %s, want 502 saying %q", resp.StatusCode, body, msg)
			}
			logLine(t, logs, "request", `"status":502`, msg)

			// The health checker dials with the same settings, and says why.
			next := *svc.Config()
			next.Health = config.Health{Interval: 20 * time.Millisecond, Timeout: time.Second, FailThreshold: 1, PassThreshold: 1}
			if err := svc.Apply(&next); err != nil {
				t.Fatal(err)
			}
			logLine(t, logs, "health check failed: backend marked unhealthy", d.URL, tc.cause)
		})
	}
}

// tlsEngine is one engine's certificate and, for mTLS, the CA its
// clients' certificates must come from.
type tlsEngine struct {
	cert    *proxytest.Cert
	clients *proxytest.CA
}

// TestInsecureSkipVerifyWarns: upstream_tls.insecure_skip_verify serves
// an engine whose certificate nothing trusts, and says so with a warning
// at start and again at every reload that keeps it on.
func TestInsecureSkipVerifyWarns(t *testing.T) {
	cert := proxytest.NewCA(t, "nobody's CA").Issue(t, "engine", proxytest.CertOptions{})
	p := proxytest.NewEngine(t, engineAnswer)
	d := proxytest.NewTLSEngine(t, cert.ServerConfig(nil), engineAnswer)
	logs := &proxytest.SyncBuffer{}
	svc := httpsLB(t, logs, p, d, config.UpstreamTLS{InsecureSkipVerify: true})
	if resp, body := post(t, svc, `{"text":"hi"}`); resp.StatusCode != 200 {
		t.Fatalf("insecure_skip_verify: %d %s", resp.StatusCode, body)
	}
	const warning = "TLS to https:// backends does not verify their certificates: anyone on the path can read and change requests and answers; set upstream_tls.ca_file instead"
	logLine(t, logs, warning, `"level":"warn"`, `"key":"upstream_tls.insecure_skip_verify"`)
	next := *svc.Config()
	if err := svc.Apply(&next); err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(logs.Bytes(), []byte(warning)); n != 2 {
		t.Fatalf("%d warnings after a start and a reload, want 2:\n%s", n, logs.Bytes())
	}
	off := *svc.Config()
	off.UpstreamTLS.InsecureSkipVerify = false
	if err := svc.Apply(&off); err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(logs.Bytes(), []byte(warning)); n != 2 {
		t.Fatalf("a reload turning it off warned again:\n%s", logs.Bytes())
	}
}

// TestUpstreamCAReloads: a CA file rewritten on disk, and a reload
// naming another, are what new connections to engines verify with; a
// reload naming an unreadable one is rejected whole.
func TestUpstreamCAReloads(t *testing.T) {
	dir := t.TempDir()
	oldCA, newCA := proxytest.NewCA(t, "old CA"), proxytest.NewCA(t, "new CA")
	caFile := oldCA.WriteCA(t, dir, "ca")
	p := proxytest.NewEngine(t, engineAnswer)
	d := proxytest.NewTLSEngine(t, newCA.Issue(t, "engine", proxytest.CertOptions{}).ServerConfig(nil), engineAnswer)
	logs := &proxytest.SyncBuffer{}
	svc := httpsLB(t, logs, p, d, config.UpstreamTLS{CAFile: caFile})
	if resp, body := post(t, svc, `{"text":"hi"}`); resp.StatusCode != 502 || !strings.Contains(body, "unknown authority") {
		t.Fatalf("engine signed by a CA not yet trusted: %d %s", resp.StatusCode, body)
	}

	newCA.WriteCA(t, dir, "ca")
	if !proxytest.WaitFor(10*time.Second, func() bool { resp, _ := post(t, svc, `{"text":"hi"}`); return resp.StatusCode == 200 }) {
		t.Fatalf("the rewritten CA file is not used; log:\n%s", logs.Bytes())
	}
	logLine(t, logs, "upstream TLS files reloaded", caFile)

	bad := *svc.Config()
	bad.UpstreamTLS.CAFile = dir + "/missing.crt"
	if err := svc.Apply(&bad); err == nil || !strings.Contains(err.Error(), "upstream_tls.ca_file") {
		t.Fatalf("a reload naming a missing CA file: %v, want an error naming upstream_tls.ca_file", err)
	}
	if resp, body := post(t, svc, `{"text":"hi"}`); resp.StatusCode != 200 {
		t.Fatalf("after a rejected reload: %d %s", resp.StatusCode, body)
	}
}

// silentTLSEngine is an https:// address that accepts connections and
// never answers the TLS handshake.
func silentTLSEngine(t *testing.T) string {
	ln := proxytest.Listen(t, "127.0.0.1:0")
	held := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held <- c // never read, never written
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		for len(held) > 0 {
			(<-held).Close()
		}
	})
	return "https://" + ln.Addr().String()
}

// TestUpstreamHandshakeBoundedByConnect: an engine that accepts the
// connection but never answers the TLS handshake costs a request no more
// than timeouts.connect: a 502 naming the backend and the handshake.
func TestUpstreamHandshakeBoundedByConnect(t *testing.T) {
	p := proxytest.NewEngine(t, engineAnswer)
	silent := silentTLSEngine(t)
	cfg := testConfig()
	cfg.Prefill = []config.Prefill{{URL: p.URL}}
	cfg.Decode = []config.Decode{{URL: silent}}
	cfg.Timeouts.Connect = 200 * time.Millisecond
	svc := startService(t, &cfg, zerolog.New(&proxytest.SyncBuffer{}))

	resp, body := post(t, svc, `{"text":"hi"}`)
	msg := "decode " + silent + " connect: TLS handshake: "
	if resp.StatusCode != 502 || !strings.Contains(body, msg) || !strings.Contains(body, "i/o timeout") {
		t.Fatalf("answer %d %s, want 502 saying %q… i/o timeout", resp.StatusCode, body, msg)
	}
}

// TestDialBoundedByTheLegsDeadline: the leg's own deadline (here the
// decode's first byte, shorter than timeouts.connect) cuts a dial short
// too: the request ends in a 504 at that deadline, not in a 502 after the
// longer connect timeout.
func TestDialBoundedByTheLegsDeadline(t *testing.T) {
	p := proxytest.NewEngine(t, engineAnswer)
	silent := silentTLSEngine(t)
	cfg := testConfig()
	cfg.Prefill = []config.Prefill{{URL: p.URL}}
	cfg.Decode = []config.Decode{{URL: silent}}
	cfg.Timeouts.Connect = time.Minute
	cfg.Timeouts.DecodeFirstByte = 300 * time.Millisecond
	svc := startService(t, &cfg, zerolog.New(&proxytest.SyncBuffer{}))

	resp, body := post(t, svc, `{"text":"hi"}`)
	if resp.StatusCode != 504 || !strings.Contains(body, "decode "+silent+" timed out") {
		t.Fatalf("answer %d %s, want a 504: the decode timed out", resp.StatusCode, body)
	}
}

// TestAdminAddsHTTPSWorker: a decode added at runtime through the admin
// API at https:// is spoken to with upstream_tls, as configured ones are.
func TestAdminAddsHTTPSWorker(t *testing.T) {
	dir := t.TempDir()
	ca := proxytest.NewCA(t, "engines CA")
	p := proxytest.NewEngine(t, engineAnswer)
	old := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{"text":"plain"}`))
	added := proxytest.NewTLSEngine(t, ca.Issue(t, "engine", proxytest.CertOptions{}).ServerConfig(nil), engineAnswer)
	port := proxytest.FreePort(t)
	svc := httpsLB(t, &proxytest.SyncBuffer{}, p, old, config.UpstreamTLS{CAFile: ca.WriteCA(t, dir, "ca")}, func(c *config.Config) {
		c.Admin = config.Admin{Host: "127.0.0.1", Port: port}
	})
	admin := "http://127.0.0.1:" + strconv.Itoa(port)
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Post(admin+"/workers", "application/json", strings.NewReader(`{"role":"decode","url":"`+added.URL+`"}`))
	if err != nil || resp.StatusCode != 201 {
		t.Fatalf("POST /workers https: %v %v", resp, err)
	}
	resp.Body.Close()
	req, _ := http.NewRequest(http.MethodDelete, admin+"/workers?url="+url.QueryEscape(old.URL), nil)
	resp, err = c.Do(req)
	if err != nil || resp.StatusCode != 202 {
		t.Fatalf("DELETE the plain decode: %v %v", resp, err)
	}
	resp.Body.Close()
	if resp, body := post(t, svc, `{"text":"hi"}`); resp.StatusCode != 200 || body != `{"text":"over TLS"}` {
		t.Fatalf("through the added https decode: %d %s", resp.StatusCode, body)
	}
}

// TestWatchStartsWhenAReloadNamesTheFirstFiles: a pdlb started without
// any TLS file watches the ones a reload names from then on.
func TestWatchStartsWhenAReloadNamesTheFirstFiles(t *testing.T) {
	dir := t.TempDir()
	oldCA, newCA := proxytest.NewCA(t, "old CA"), proxytest.NewCA(t, "new CA")
	p := proxytest.NewEngine(t, engineAnswer)
	d := proxytest.NewTLSEngine(t, newCA.Issue(t, "engine", proxytest.CertOptions{}).ServerConfig(nil), engineAnswer)
	logs := &proxytest.SyncBuffer{}
	svc := httpsLB(t, logs, p, d, config.UpstreamTLS{})

	next := *svc.Config()
	next.UpstreamTLS.CAFile = oldCA.WriteCA(t, dir, "ca")
	if err := svc.Apply(&next); err != nil {
		t.Fatal(err)
	}
	if resp, body := post(t, svc, `{"text":"hi"}`); resp.StatusCode != 502 {
		t.Fatalf("engine signed by a CA not trusted: %d %s", resp.StatusCode, body)
	}
	newCA.WriteCA(t, dir, "ca")
	if !proxytest.WaitFor(10*time.Second, func() bool { resp, _ := post(t, svc, `{"text":"hi"}`); return resp.StatusCode == 200 }) {
		t.Fatalf("the CA file a reload named is not watched; log:\n%s", logs.Bytes())
	}
}
