package router

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"pdlb/config"
	"pdlb/proxy"
	"pdlb/proxy/proxytest"
	"pdlb/router/policy"
)

// keyedLB starts pdlb with n prefills under consistent_hashing, read from
// header, and one decode. The load factor is loose: these tests are about
// where the key comes from, not about the bound.
func keyedLB(t *testing.T, n int, header string, prefill fasthttp.RequestHandler, decode *proxytest.Engine, logs *proxytest.SyncBuffer, opts ...lbOption) (*lb, []*proxytest.Engine) {
	t.Helper()
	ps := make([]*proxytest.Engine, n)
	for i := range ps {
		ps[i] = proxytest.NewEngine(t, prefill)
	}
	opts = append([]lbOption{func(c *config.Config) {
		c.Policy.Prefill, c.Policy.Decode = "consistent_hashing", "random"
		c.Policy.ConsistentHashing = config.ConsistentHashing{Header: header, LoadFactor: 100}
	}}, opts...)
	return startLBWithLog(t, ps, []*proxytest.Engine{decode}, zerolog.New(logs), opts...), ps
}

// homeOf is the prefill engine the policy sends key to, all prefills idle
// and available but those in skip.
func homeOf(t *testing.T, l *lb, ps []*proxytest.Engine, key string, skip ...string) *proxytest.Engine {
	t.Helper()
	p, err := policy.New("consistent_hashing", proxy.Prefill, config.Policy{ConsistentHashing: config.ConsistentHashing{Header: "X", LoadFactor: 100}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := p.Pick(policy.Request{Key: key}, l.pool.Backends(proxy.Prefill), func(b *proxy.Backend) bool {
		for _, s := range skip {
			if b.URL == s {
				return false
			}
		}
		return true
	})
	for _, e := range ps {
		if e.URL == b.URL {
			return e
		}
	}
	t.Fatalf("no engine at %s", b.URL)
	return nil
}

func postWithHeader(t *testing.T, url, body, header, value string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if header != "" {
		req.Header.Set(header, value)
	}
	resp, err := http.DefaultClient.Do(req)
	return proxytest.ReadAll(t, resp, err)
}

// logLines decodes the request log lines.
func logLines(t *testing.T, logs *proxytest.SyncBuffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range bytes.Split(logs.Bytes(), []byte("\n")) {
		var m map[string]any
		if json.Unmarshal(line, &m) == nil && m["message"] == "request" {
			out = append(out, m)
		}
	}
	return out
}

// TestRoutingKeyHeaderPinsSessions: with consistent_hashing, every request
// of a session goes to the prefill its X-Session-ID hashes to (the
// header's name in any case), and one without the header is logged at
// rank -1.
func TestRoutingKeyHeaderPinsSessions(t *testing.T) {
	logs := &proxytest.SyncBuffer{}
	d := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	l, ps := keyedLB(t, 4, "X-Session-ID", proxytest.JSONAnswer(200, `{}`), d, logs)
	want := map[*proxytest.Engine]int{}
	for s := range 12 {
		session := "session-" + strconv.Itoa(s)
		want[homeOf(t, l, ps, session)] += 3
		for range 3 {
			if resp, body := postWithHeader(t, l.URL+"/generate", `{"text":"hi"}`, "x-session-id", session); resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
		}
	}
	if len(want) < 2 {
		t.Fatal("12 sessions share one home: the test proves nothing")
	}
	// The prefill legs may end after the answers (pdlb answers with the
	// decode's).
	proxytest.WaitFor(2*time.Second, func() bool {
		for _, e := range ps {
			if e.Count() != want[e] {
				return false
			}
		}
		return true
	})
	for i, e := range ps {
		if e.Count() != want[e] {
			t.Errorf("prefill %d served %d requests, want %d (its sessions' 3 each)", i, e.Count(), want[e])
		}
	}
	postWithHeader(t, l.URL+"/generate", `{"text":"hi"}`, "", "")
	var lines []map[string]any
	proxytest.WaitFor(2*time.Second, func() bool { lines = logLines(t, logs); return len(lines) == 37 })
	if len(lines) != 37 {
		t.Fatalf("%d request log lines, want 37", len(lines))
	}
	for _, m := range lines[:36] {
		if m["prefill_hash_rank"] != 0.0 {
			t.Fatalf("a keyed request was logged with prefill_hash_rank %v, want 0: %v", m["prefill_hash_rank"], m)
		}
	}
	if m := lines[36]; m["prefill_hash_rank"] != -1.0 {
		t.Fatalf("the request without a key was logged with prefill_hash_rank %v, want -1", m["prefill_hash_rank"])
	}
}

// TestRoutingKeyReadOnlyForKeyedPolicies: no header is read unless a
// policy in force routes by it, and a reload that changes the header
// takes effect.
func TestRoutingKeyReadOnlyForKeyedPolicies(t *testing.T) {
	c := config.Default()
	c.Policy.Prefill, c.Policy.Decode = "power_of_two", "prefix_hash"
	r := New(Options{Settings: SettingsFrom(&c), Pool: proxy.NewPool(nil), Log: testLog(t)})
	if h := r.policies.Load().keyHeader; h != "" {
		t.Fatalf("reads header %q with no keyed policy in force", h)
	}
	st := r.Settings()
	st.Policy.Decode, st.Policy.ConsistentHashing.Header = "consistent_hashing", "X-User"
	r.Apply(st)
	if h := r.policies.Load().keyHeader; h != "X-User" {
		t.Fatalf("reads header %q after the reload, want X-User", h)
	}
}

// TestRoutingKeyOfStreamOutlivesItsContext: a stream's attempts run after
// fasthttp recycled its request context, so its key must be a copy. The
// session's home holds the first attempt while other connections take
// request contexts from fasthttp's pool, the stream's among them, and parse
// another session's header into it; the home then answers 503, and the
// retry must go to the session's own second backend.
func TestRoutingKeyOfStreamOutlivesItsContext(t *testing.T) {
	release := make(chan struct{})
	var held atomic.Bool
	var homeAddr atomic.Value
	healthy := sseOrJSON()
	prefill := func(ctx *fasthttp.RequestCtx) {
		if a, _ := homeAddr.Load().(string); a == ctx.LocalAddr().String() {
			if held.CompareAndSwap(false, true) {
				<-release
			}
			ctx.SetStatusCode(503)
			return
		}
		healthy(ctx)
	}
	// The decode answers only after the prefill has: the 503 comes first,
	// before anything is committed to the client.
	d := proxytest.NewEngine(t, func(ctx *fasthttp.RequestCtx) {
		<-release
		time.Sleep(50 * time.Millisecond)
		healthy(ctx)
	})
	logs := &proxytest.SyncBuffer{}
	l, ps := keyedLB(t, 8, "X-Session-ID", prefill, d, logs, func(c *config.Config) { c.Retry.MaxAttempts = 2 })
	const session, other = "alice-0123456789", "mallory-98765432" // one length: the bytes are overwritten in place
	home := homeOf(t, l, ps, session)
	homeAddr.Store(strings.TrimPrefix(home.URL, "http://"))
	second := homeOf(t, l, ps, session, home.URL)

	// Raw requests, so that the session header is the first one fasthttp
	// keeps in its list (Host, Content-Type and Content-Length are kept
	// apart) in both.
	addr := strings.TrimPrefix(l.URL, "http://")
	body := `{"text":"hi","stream":true}`
	stream := dial(t, addr)
	stream.Write([]byte("POST /generate HTTP/1.1\r\nHost: pdlb\r\nX-Session-ID: " + session +
		"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body))
	if !proxytest.WaitFor(2*time.Second, held.Load) {
		t.Fatal("the first attempt never reached the session's home")
	}
	// Many connections at once each hold a request context: between them
	// they empty fasthttp's pool of contexts.
	conns := make([]net.Conn, 32)
	for i := range conns {
		conns[i] = dial(t, addr)
	}
	for _, c := range conns {
		c.Write([]byte("GET /liveness HTTP/1.1\r\nHost: pdlb\r\nX-Session-ID: " + other + "\r\n\r\n"))
	}
	for _, c := range conns {
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		proxytest.ReadAll(t, resp, err)
	}
	close(release)
	resp, err := http.ReadResponse(bufio.NewReader(stream), nil)
	if _, got := proxytest.ReadAll(t, resp, err); resp.StatusCode != 200 {
		t.Fatalf("stream answered %d %s", resp.StatusCode, got)
	}
	proxytest.WaitFor(2*time.Second, func() bool { return second.Count() == 1 })
	if second.Count() != 1 {
		for i, e := range ps {
			t.Logf("prefill %d (home %v, second %v): %d requests", i, e == home, e == second, e.Count())
		}
		t.Fatal("the retry did not go to the session's second backend: its key changed under it")
	}
	var lines []map[string]any
	proxytest.WaitFor(2*time.Second, func() bool { lines = logLines(t, logs); return len(lines) > 0 })
	if len(lines) != 1 || lines[0]["prefill_hash_rank"] != 1.0 || lines[0]["attempts"] != 2.0 {
		t.Fatalf("log lines %v, want one with attempts 2 and prefill_hash_rank 1", lines)
	}
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	t.Cleanup(func() { c.Close() })
	return c
}
