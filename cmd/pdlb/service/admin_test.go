package service

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"pdlb"
	"pdlb/config"
	"pdlb/proxy"
	"pdlb/proxy/proxytest"
)

// adminServer is an Admin on a real loopback listener.
type adminServer struct {
	URL   string
	admin *Admin
	pool  *proxy.Pool
}

// startAdmin serves an Admin over pool; build defaults to a Service's
// NewBackend with breakers on, as cmd/pdlb wires it.
func startAdmin(t *testing.T, pool *proxy.Pool, build BuildFunc, apiKey string) *adminServer {
	t.Helper()
	log := zerolog.New(io.Discard)
	if testing.Verbose() {
		log = zerolog.New(zerolog.NewTestWriter(t))
	}
	if build == nil {
		cfg := testConfig()
		cfg.Breaker = config.Breaker{Enabled: true, ConsecutiveFailures: 5, OpenTimeout: time.Minute, HalfOpenMaxRequests: 1}
		svc, err := New(&cfg, log)
		if err != nil {
			t.Fatal(err)
		}
		if pool == nil {
			pool = svc.Pool
		}
		build = svc.NewBackend
	}
	a := NewAdmin(pool, build, apiKey, log)
	a.drainPoll = 2 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: a.Handler, Logger: proxytest.QuietLogger{}}
	go srv.Serve(ln)
	t.Cleanup(func() {
		srv.Shutdown()
		a.Close()
	})
	return &adminServer{URL: "http://" + ln.Addr().String(), admin: a, pool: pool}
}

// do sends one admin request and returns the status and body.
func (s *adminServer) do(t *testing.T, method, path, body, key string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, s.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q, want application/json", method, path, ct)
	}
	return resp.StatusCode, string(b)
}

func (s *adminServer) workers(t *testing.T) []Worker {
	t.Helper()
	st, body := s.do(t, "GET", "/workers", "", "")
	if st != 200 {
		t.Fatalf("GET /workers: %d %s", st, body)
	}
	var ws []Worker
	if err := json.Unmarshal([]byte(body), &ws); err != nil {
		t.Fatalf("GET /workers is not a worker list: %v\n%s", err, body)
	}
	return ws
}

func decodeWorker(t *testing.T, body string) Worker {
	t.Helper()
	var w Worker
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		t.Fatalf("not a worker: %v\n%s", err, body)
	}
	return w
}

func errorMessage(t *testing.T, body string) (int, string, string) {
	t.Helper()
	var e proxytest.ErrorBody
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Type == "" {
		t.Fatalf("not pdlb's JSON error shape: %v\n%s", err, body)
	}
	return e.Error.Code, e.Error.Type, e.Error.Message
}

func TestAdminAddAndList(t *testing.T) {
	s := startAdmin(t, nil, nil, "")
	if ws := s.workers(t); len(ws) != 0 {
		t.Fatalf("empty pool lists %v", ws)
	}

	st, body := s.do(t, "POST", "/workers", `{"role":"prefill","url":"http://127.0.0.1:30001","bootstrap_port":9001}`, "")
	if st != 201 {
		t.Fatalf("add prefill: %d %s", st, body)
	}
	port := 9001
	want := Worker{Role: "prefill", URL: "http://127.0.0.1:30001", Healthy: true, Breaker: "closed",
		RegistryReady: true, BootstrapPort: &port, BootstrapAddr: "127.0.0.1:9001"}
	if got := decodeWorker(t, body); !sameWorker(got, want) {
		t.Fatalf("added prefill = %+v, want %+v", got, want)
	}

	// A trailing slash is dropped as NewBackend does; bootstrap_port null is fine.
	st, body = s.do(t, "POST", "/workers", `{"role":"decode","url":"http://127.0.0.1:30002/","bootstrap_port":null}`, "")
	if st != 201 {
		t.Fatalf("add decode: %d %s", st, body)
	}
	if w := decodeWorker(t, body); w.URL != "http://127.0.0.1:30002" || w.Role != "decode" || w.BootstrapAddr != "" {
		t.Fatalf("added decode = %+v", w)
	}

	if p := s.pool.Backends(proxy.Prefill); len(p) != 1 || p[0].URL != "http://127.0.0.1:30001" || p[0].Bootstrap().Addr != "127.0.0.1:9001" {
		t.Fatalf("pool prefills = %v", p)
	}
	if d := s.pool.Backends(proxy.Decode); len(d) != 1 || d[0].URL != "http://127.0.0.1:30002" {
		t.Fatalf("pool decodes = %v", d)
	}
	ws := s.workers(t)
	if len(ws) != 2 || ws[0].Role != "prefill" || ws[1].Role != "decode" {
		t.Fatalf("GET /workers = %+v", ws)
	}

	// The listing reflects live state.
	s.pool.Backends(proxy.Decode)[0].SetHealthy(false)
	if ws := s.workers(t); ws[1].Healthy {
		t.Fatal("GET /workers shows an unhealthy decode as healthy")
	}
}

func sameWorker(a, b Worker) bool {
	pa, pb := a.BootstrapPort, b.BootstrapPort
	if (pa == nil) != (pb == nil) || (pa != nil && *pa != *pb) {
		return false
	}
	if !slices.Equal(a.DPInFlight, b.DPInFlight) {
		return false
	}
	a.BootstrapPort, b.BootstrapPort = nil, nil
	a.DPInFlight, b.DPInFlight = nil, nil
	return reflect.DeepEqual(a, b)
}

func TestAdminBreakerDisabled(t *testing.T) {
	build := func(u string, role proxy.Role, _ *int) (*proxy.Backend, error) {
		return proxy.NewBackend(u, role, time.Second)
	}
	s := startAdmin(t, proxy.NewPool(nil), build, "")
	st, body := s.do(t, "POST", "/workers", `{"role":"decode","url":"http://127.0.0.1:30002"}`, "")
	if st != 201 || decodeWorker(t, body).Breaker != "disabled" {
		t.Fatalf("worker without breaker: %d %s", st, body)
	}
}

func TestAdminRegistryReady(t *testing.T) {
	pool := proxy.NewPool(readyAddrs{"127.0.0.1:9001": true})
	build := func(u string, role proxy.Role, port *int) (*proxy.Backend, error) {
		b, err := proxy.NewBackend(u, role, time.Second)
		if err == nil {
			b.SetBootstrap(port, "", config.DefaultBootstrapPort)
		}
		return b, err
	}
	s := startAdmin(t, pool, build, "")
	s.do(t, "POST", "/workers", `{"role":"prefill","url":"http://127.0.0.1:30001","bootstrap_port":9001}`, "")
	s.do(t, "POST", "/workers", `{"role":"prefill","url":"http://127.0.0.1:30003","bootstrap_port":9003}`, "")
	ws := s.workers(t)
	if len(ws) != 2 || !ws[0].RegistryReady || ws[1].RegistryReady {
		t.Fatalf("registry_ready not taken from the pool's Readiness: %+v", ws)
	}
}

// readyAddrs is a proxy.Readiness over a fixed set of namespaces.
type readyAddrs map[string]bool

func (r readyAddrs) Ready(addr string) bool { return r[addr] }

func TestAdminRefusals(t *testing.T) {
	s := startAdmin(t, nil, nil, "")
	if st, body := s.do(t, "POST", "/workers", `{"role":"decode","url":"http://127.0.0.1:30002"}`, ""); st != 201 {
		t.Fatalf("setup: %d %s", st, body)
	}
	cases := []struct {
		name, method, path, body string
		status                   int
		mention                  string // the message must name this
	}{
		{"duplicate", "POST", "/workers", `{"role":"decode","url":"http://127.0.0.1:30002"}`, 409, "url"},
		{"duplicate other role", "POST", "/workers", `{"role":"prefill","url":"http://127.0.0.1:30002/"}`, 409, "url"},
		{"duplicate spelled otherwise", "POST", "/workers", `{"role":"decode","url":"HTTP://127.0.0.1:30002"}`, 409, "url"},
		{"not json", "POST", "/workers", `{"role":`, 400, "body"},
		{"empty body", "POST", "/workers", ``, 400, "body"},
		{"two values", "POST", "/workers", `{"role":"decode","url":"http://h:1"} {}`, 400, "body"},
		{"unknown field", "POST", "/workers", `{"role":"prefill","url":"http://h:1","bootstrapPort":1}`, 400, "bootstrapPort"},
		{"wrong type", "POST", "/workers", `{"role":"prefill","url":"http://h:1","bootstrap_port":"9000"}`, 400, "bootstrap_port"},
		{"missing role", "POST", "/workers", `{"url":"http://h:1"}`, 400, "role"},
		{"bad role", "POST", "/workers", `{"role":"encode","url":"http://h:1"}`, 400, "role"},
		{"missing url", "POST", "/workers", `{"role":"decode"}`, 400, "url"},
		{"ftp url", "POST", "/workers", `{"role":"decode","url":"ftp://h:1"}`, 400, "url"},
		{"no host", "POST", "/workers", `{"role":"decode","url":"http://"}`, 400, "url"},
		{"url with path", "POST", "/workers", `{"role":"decode","url":"http://h:1/v1"}`, 400, "url"},
		{"unparsable url", "POST", "/workers", `{"role":"decode","url":"http://[::1"}`, 400, "url"},
		{"port on decode", "POST", "/workers", `{"role":"decode","url":"http://h:1","bootstrap_port":9000}`, 400, "bootstrap_port"},
		{"port out of range", "POST", "/workers", `{"role":"prefill","url":"http://h:1","bootstrap_port":70000}`, 400, "bootstrap_port"},
		{"delete unknown", "DELETE", "/workers?url=http://127.0.0.1:1", ``, 404, "url"},
		{"delete without url", "DELETE", "/workers", ``, 400, "url"},
		{"unknown path", "GET", "/nodes", ``, 404, "/nodes"},
		{"wrong method", "PUT", "/workers", `{}`, 405, "PUT"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, body := s.do(t, c.method, c.path, c.body, "")
			if st != c.status {
				t.Fatalf("status %d, want %d: %s", st, c.status, body)
			}
			code, _, msg := errorMessage(t, body)
			if code != c.status || !strings.Contains(msg, c.mention) {
				t.Fatalf("error %d %q, want code %d naming %q", code, msg, c.status, c.mention)
			}
		})
	}
	if ws := s.workers(t); len(ws) != 1 {
		t.Fatalf("refused requests changed the pool: %+v", ws)
	}
}

func TestAdminAuth(t *testing.T) {
	s := startAdmin(t, nil, nil, "s3cret")
	for _, c := range []struct{ name, key string }{{"no key", ""}, {"wrong key", "s3cres"}, {"key prefix", "s3cre"}} {
		t.Run(c.name, func(t *testing.T) {
			for _, r := range []struct{ method, path, body string }{
				{"GET", "/workers", ""},
				{"POST", "/workers", `{"role":"decode","url":"http://127.0.0.1:30002"}`},
				{"DELETE", "/workers?url=http://127.0.0.1:30002", ""},
				{"GET", "/nope", ""}, // no route discovery without the key
			} {
				st, body := s.do(t, r.method, r.path, r.body, c.key)
				if st != 401 {
					t.Fatalf("%s %s: %d, want 401: %s", r.method, r.path, st, body)
				}
				if _, typ, _ := errorMessage(t, body); typ != pdlb.ErrAuthentication {
					t.Fatalf("error type %q, want %q", typ, pdlb.ErrAuthentication)
				}
			}
		})
	}
	if len(s.pool.Backends(proxy.Decode)) != 0 {
		t.Fatal("an unauthenticated POST added a worker")
	}
	if st, body := s.do(t, "POST", "/workers", `{"role":"decode","url":"http://127.0.0.1:30002"}`, "s3cret"); st != 201 {
		t.Fatalf("with the key: %d %s", st, body)
	}
	if st, _ := s.do(t, "GET", "/workers", "", "s3cret"); st != 200 {
		t.Fatalf("GET with the key: %d", st)
	}
}

// TestAdminDrainWaitsForInFlight: DELETE takes the worker out of selection
// at once but closes its connections only after the last request is done.
func TestAdminDrainWaitsForInFlight(t *testing.T) {
	eng := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	s := startAdmin(t, nil, nil, "")
	if st, body := s.do(t, "POST", "/workers", `{"role":"decode","url":"`+eng.URL+`"}`, ""); st != 201 {
		t.Fatalf("add: %d %s", st, body)
	}
	b := s.pool.Find(eng.URL)
	// Leave an idle keep-alive connection in the backend's pool.
	if res, err := b.Call("GET", "/health", nil, time.Second); err != nil || res.Status != 200 {
		t.Fatalf("warm-up call: %v %v", res.Status, err)
	}
	ticket, ok := b.Acquire()
	if !ok {
		t.Fatal("Acquire refused")
	}

	st, body := s.do(t, "DELETE", "/workers?url="+url.QueryEscape(eng.URL+"/"), "", "")
	if st != 202 {
		t.Fatalf("DELETE: %d %s", st, body)
	}
	if w := decodeWorker(t, body); !w.Draining || w.InFlight != 1 {
		t.Fatalf("DELETE answered %+v, want draining with 1 in flight", w)
	}
	if s.pool.Find(eng.URL) != nil || len(s.pool.Backends(proxy.Decode)) != 0 {
		t.Fatal("drained worker still selectable")
	}
	if !b.Draining() {
		t.Fatal("backend not marked draining")
	}
	if ws := s.workers(t); len(ws) != 1 || !ws[0].Draining || ws[0].URL != eng.URL {
		t.Fatalf("GET /workers during drain = %+v, want the draining worker", ws)
	}
	if eng.WaitClosed(100 * time.Millisecond) {
		t.Fatal("connections closed while a request was still in flight")
	}

	ticket.Done(nil)
	if !eng.WaitClosed(2 * time.Second) {
		t.Fatal("idle connection not closed after the last request finished")
	}
	if !proxytest.WaitFor(2*time.Second, func() bool { return len(s.workers(t)) == 0 }) {
		t.Fatalf("drained worker still listed: %+v", s.workers(t))
	}
	// The URL is free again.
	if st, body := s.do(t, "POST", "/workers", `{"role":"decode","url":"`+eng.URL+`"}`, ""); st != 201 {
		t.Fatalf("re-add after drain: %d %s", st, body)
	}
}

// TestAdminDrainThroughRouter drains a decode while a real request is on
// it: that request completes, new ones find no decode.
func TestAdminDrainThroughRouter(t *testing.T) {
	release := make(chan struct{})
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	d := proxytest.NewEngine(t, func(ctx *fasthttp.RequestCtx) {
		<-release
		proxytest.JSONAnswer(200, `{"text":"slow"}`)(ctx)
	})
	defer close(release) // unblock the handler if the test fails early
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d})
	s := startAdmin(t, l.pool, nil, "")

	type result struct {
		status int
		body   string
	}
	done := make(chan result, 1)
	go func() {
		resp, err := http.Post(l.URL+"/generate", "application/json", strings.NewReader(`{"text":"hi"}`))
		if err != nil {
			done <- result{0, err.Error()}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		done <- result{resp.StatusCode, string(b)}
	}()
	if !proxytest.WaitFor(2*time.Second, func() bool { return d.Count() == 1 }) {
		t.Fatal("request never reached the decode")
	}
	if st, body := s.do(t, "DELETE", "/workers?url="+url.QueryEscape(d.URL), "", ""); st != 202 {
		t.Fatalf("DELETE: %d %s", st, body)
	}

	resp, _ := proxytest.Post(t, l.URL+"/generate", `{"text":"after"}`)
	if resp.StatusCode != 503 {
		t.Fatalf("request after the drain: %d, want 503 (no decode left)", resp.StatusCode)
	}
	if d.Count() != 1 {
		t.Fatal("a new request reached the draining decode")
	}

	release <- struct{}{}
	r := <-done
	if r.status != 200 || r.body != `{"text":"slow"}` {
		t.Fatalf("in-flight request during drain: %d %s", r.status, r.body)
	}
	if !proxytest.WaitFor(2*time.Second, func() bool { return len(s.workers(t)) == 1 }) {
		t.Fatalf("drain never finished: %+v", s.workers(t))
	}
	if !d.WaitClosed(2 * time.Second) {
		t.Fatal("drained decode's connection left open")
	}
}

// TestAdminCloseEndsDrains: a drain stuck on a request that never ends is
// cut short by Close, which returns (no goroutine left behind).
func TestAdminCloseEndsDrains(t *testing.T) {
	s := startAdmin(t, nil, nil, "")
	s.do(t, "POST", "/workers", `{"role":"decode","url":"http://127.0.0.1:30002"}`, "")
	b := s.pool.Find("http://127.0.0.1:30002")
	ticket, _ := b.Acquire()
	defer ticket.Done(nil)
	if st, _ := s.do(t, "DELETE", "/workers?url=http://127.0.0.1:30002", "", ""); st != 202 {
		t.Fatalf("DELETE: %d", st)
	}
	closed := make(chan struct{})
	go func() { s.admin.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(2 * time.Second):
		t.Fatal("Close did not end a drain waiting on a request")
	}
}
