package router

import (
	"bufio"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"pdlb"
	"pdlb/bench/mock"
	"pdlb/config"
	"pdlb/proxy/proxytest"
)

// Engine-level aborts (proxy/abort.go), end to end: real mock engines that
// record /abort_request and stop the named request, a real pdlb, real
// clients. Each test makes sure the engine to be aborted has received its
// leg before the other leg fails: a leg cut before it reached its engine
// is rightly not aborted, and a race would make the count unsure.

func withAborts(max int) lbOption {
	return func(c *config.Config) {
		c.Abort = config.Abort{Enabled: true, Timeout: 2 * time.Second, MaxInFlight: max}
	}
}

// mockEngine serves a mock SGLang engine on loopback until the test ends.
func mockEngine(t *testing.T, o mock.Options) (*proxytest.Engine, *mock.Engine) {
	t.Helper()
	e := mock.New(o, zerolog.Nop())
	ln := proxytest.Listen(t, "127.0.0.1:0")
	go e.Serve(ln)
	t.Cleanup(func() { e.Shutdown() })
	return &proxytest.Engine{URL: "http://" + ln.Addr().String()}, e
}

// stalled is a mock engine that admits every request and works on it until
// it is aborted or its client leaves (a decode waiting for its KV).
func stalled(t *testing.T, role string, noRoute bool) (*proxytest.Engine, *mock.Engine) {
	return mockEngine(t, mock.Options{Role: role, StallProb: 1, NoAbortRoute: noRoute})
}

// failOnceSeen answers status once m has received n generation requests
// (the sibling leg is then at work).
func failOnceSeen(m *mock.Engine, path string, n int64, status int) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		proxytest.WaitFor(5*time.Second, func() bool { return m.Stats().Requests[path] >= n })
		ctx.SetStatusCode(status)
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"error":{"message":"boom"}}`)
	}
}

// abortsSettle waits for pdlb to have sent every abort it started, and for
// want aborts to have reached m; it returns the rids m was asked to abort.
func abortsSettle(t *testing.T, l *lb, m *mock.Engine, want int) []string {
	t.Helper()
	proxytest.WaitFor(10*time.Second, func() bool {
		return l.router.proxy.AbortsInFlight() == 0 && len(m.Stats().Aborted) >= want
	})
	return m.Stats().Aborted
}

// ridOf is the rid member of the last /generate-like body m received.
func ridOf(t *testing.T, m *mock.Engine) string {
	t.Helper()
	bodies := m.Stats().Bodies // a copy
	slices.Reverse(bodies)
	for _, b := range bodies {
		if b.Path != "/abort_request" {
			return gjson.GetBytes(b.Body, "rid").Raw
		}
	}
	t.Fatal("no generation request received")
	return ""
}

// bothAbortedOnce checks that each engine was asked once to abort rid, and
// that the metric says why.
func bothAbortedOnce(t *testing.T, l *lb, pm, dm *mock.Engine, rid, reason string) {
	t.Helper()
	sameRids(t, "prefill", abortsSettle(t, l, pm, 1), rid)
	sameRids(t, "decode", abortsSettle(t, l, dm, 1), rid)
	v := metricValues(t, l, "pdlb_aborts_total")
	for _, role := range []string{"prefill", "decode"} {
		if v[`pdlb_aborts_total{role="`+role+`",reason="`+reason+`",result="ok"}`] != 1 {
			t.Errorf("pdlb_aborts_total: %v", v)
		}
	}
}

// onlyAborts checks that series, counting 1, is pdlb_aborts_total's only one.
func onlyAborts(t *testing.T, l *lb, series string) {
	t.Helper()
	if v := metricValues(t, l, "pdlb_aborts_total"); len(v) != 1 || v[series] != 1 {
		t.Errorf("pdlb_aborts_total: %v, want %s 1 alone", v, series)
	}
}

// rawPost sends a /generate request on a connection of its own, for the
// test to read (or leave) as it likes.
func rawPost(t *testing.T, l *lb, body string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(l.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.Write([]byte("POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body))
	return c
}

func sameRids(t *testing.T, who string, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("%s aborted %q, want %q", who, got, want)
	}
}

func TestAbortDecodeWhenPrefillFails(t *testing.T) {
	d, dm := stalled(t, mock.RoleDecode, false)
	p := proxytest.NewEngine(t, failOnceSeen(dm, "/generate", 1, 500))
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d}, withAborts(16))

	resp, body := proxytest.Post(t, l.URL+"/generate", `{"text":"hi","rid":"client-1"}`)
	if resp.StatusCode != 502 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	sameRids(t, "decode", abortsSettle(t, l, dm, 1), "client-1")
	if n := p.Count(); n != 1 {
		t.Errorf("the prefill that failed got %d requests, want its leg alone", n)
	}
	onlyAborts(t, l, `pdlb_aborts_total{role="decode",reason="prefill_failed",result="ok"}`)
}

func TestAbortPrefillWhenDecodeFails(t *testing.T) {
	p, pm := stalled(t, mock.RolePrefill, false)
	d := proxytest.NewEngine(t, failOnceSeen(pm, "/generate", 1, 500))
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d}, withAborts(16))

	resp, body := proxytest.Post(t, l.URL+"/generate", `{"text":"hi"}`)
	if resp.StatusCode != 502 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	// No rid from the client: pdlb's own, "<request id>-<room>".
	rid := ridOf(t, pm)
	id := resp.Header.Get("X-Request-ID")
	if !strings.HasPrefix(rid, `"`+id+"-") || len(rid) != len(id)+1+roomDigits+2 {
		t.Fatalf("prefill got rid %s, want \"%s-<19 digits>\"", rid, id)
	}
	sameRids(t, "prefill", abortsSettle(t, l, pm, 1), strings.Trim(rid, `"`))
	onlyAborts(t, l, `pdlb_aborts_total{role="prefill",reason="decode_failed",result="ok"}`)
}

// A client that leaves before its first token: both engines are working
// on the request and each gets one abort.
func TestAbortBothWhenClientLeavesBeforeFirstToken(t *testing.T) {
	for _, stream := range []bool{false, true} {
		name := map[bool]string{false: "plain", true: "stream"}[stream]
		t.Run(name, func(t *testing.T) {
			p, pm := stalled(t, mock.RolePrefill, false)
			d, dm := stalled(t, mock.RoleDecode, false)
			l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d}, withAborts(16))

			c := rawPost(t, l, `{"text":"hi","rid":"gone-1","stream":`+map[bool]string{false: "false", true: "true"}[stream]+`}`)
			if !proxytest.WaitFor(5*time.Second, func() bool {
				return pm.Stats().Requests["/generate"] == 1 && dm.Stats().Requests["/generate"] == 1
			}) {
				t.Fatal("the legs did not reach both engines")
			}
			c.Close()
			bothAbortedOnce(t, l, pm, dm, "gone-1", "client_gone")
		})
	}
}

// A client that leaves mid-stream: the decode is still generating, the
// prefill is long done; only the decode is aborted, and it stops.
func TestAbortDecodeWhenClientLeavesMidStream(t *testing.T) {
	p, pm := mockEngine(t, mock.Options{Role: mock.RolePrefill, TokenDelay: -1})
	d, dm := mockEngine(t, mock.Options{TokenDelay: 50 * time.Millisecond, OutputLen: 1000})
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d}, withAborts(16))

	c := rawPost(t, l, `{"text":"hi","rid":"mid-1","stream":true}`)
	br := bufio.NewReader(c)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "data: {") {
			break // the first token
		}
	}
	c.Close()
	sameRids(t, "decode", abortsSettle(t, l, dm, 1), "mid-1")
	sameRids(t, "prefill", pm.Stats().Aborted)
	if !proxytest.WaitFor(5*time.Second, func() bool { return dm.Stats().Streams == 0 }) {
		t.Error("the decode is still streaming")
	}
	onlyAborts(t, l, `pdlb_aborts_total{role="decode",reason="client_gone",result="ok"}`)
}

func TestAbortBothWhenRequestTimesOut(t *testing.T) {
	p, pm := stalled(t, mock.RolePrefill, false)
	d, dm := stalled(t, mock.RoleDecode, false)
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d}, withAborts(16), func(c *config.Config) {
		c.Timeouts.Request = 500 * time.Millisecond
	})
	resp, body := proxytest.Post(t, l.URL+"/generate", `{"text":"hi","rid":"slow-1"}`)
	if resp.StatusCode != 504 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	bothAbortedOnce(t, l, pm, dm, "slow-1", "timeout")
}

// Requests that complete send no abort, streamed or not, with or without
// the client's rid.
func TestNoAbortWhenRequestCompletes(t *testing.T) {
	p, pm := mockEngine(t, mock.Options{Role: mock.RolePrefill, TokenDelay: -1})
	d, dm := mockEngine(t, mock.Options{TokenDelay: -1, OutputLen: 4})
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d}, withAborts(16))
	for _, body := range []string{
		`{"text":"hi"}`, `{"text":"hi","stream":true}`, `{"text":["a","b"],"rid":["x","y"]}`,
		`{"text":"hi","rid":"r","stream":true,"return_logprob":true}`,
	} {
		resp, out := proxytest.Post(t, l.URL+"/generate", body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: status %d: %s", body, resp.StatusCode, out)
		}
	}
	resp, out := proxytest.Post(t, l.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"stream":true}`)
	if resp.StatusCode != 200 {
		t.Fatalf("chat: status %d: %s", resp.StatusCode, out)
	}
	noneInFlight(t, l)
	proxytest.WaitFor(2*time.Second, func() bool { return l.router.proxy.AbortsInFlight() == 0 })
	sameRids(t, "prefill", pm.Stats().Aborted)
	sameRids(t, "decode", dm.Stats().Aborted)
	if v := metricValues(t, l, "pdlb_aborts_total"); len(v) != 0 {
		t.Errorf("pdlb_aborts_total: %v", v)
	}
}

// A batch's items each have a rid: pdlb's own list, or SGLang's
// "<rid>_<i>" for one client string.
func TestAbortBatchRids(t *testing.T) {
	cases := []struct {
		name, body string
		want       func(sent string) []string
	}{
		{"client list", `{"text":["a","b"],"rid":["r-a","r-b"]}`, func(string) []string { return []string{"r-a", "r-b"} }},
		{"client string", `{"text":["a","b"],"rid":"r"}`, func(string) []string { return []string{"r_0", "r_1"} }},
		{"pdlb's own", `{"input_ids":[[1,2],[3]]}`, func(sent string) []string {
			var out []string
			for _, v := range gjson.Parse(sent).Array() {
				out = append(out, v.String())
			}
			return out
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, dm := stalled(t, mock.RoleDecode, false)
			p := proxytest.NewEngine(t, failOnceSeen(dm, "/generate", 1, 500))
			l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d}, withAborts(16))
			resp, body := proxytest.Post(t, l.URL+"/generate", c.body)
			if resp.StatusCode != 502 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			sent := ridOf(t, dm)
			want := c.want(sent)
			if len(want) != 2 {
				t.Fatalf("decode got rid %s, want a list of 2", sent)
			}
			sameRids(t, "decode", abortsSettle(t, l, dm, 2), want...)
		})
	}
}

// Over abort.max_in_flight, aborts are dropped and counted, never queued.
func TestAbortsOverMaxInFlightAreDropped(t *testing.T) {
	d, dm := stalled(t, mock.RoleDecode, false)
	p := proxytest.NewEngine(t, failOnceSeen(dm, "/generate", 1, 500))
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d}, withAborts(1))
	resp, body := proxytest.Post(t, l.URL+"/generate", `{"text":["a","b"],"rid":["r-a","r-b"]}`)
	if resp.StatusCode != 502 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if !proxytest.WaitFor(5*time.Second, func() bool {
		return metricValues(t, l, "pdlb_aborts_total")[`pdlb_aborts_total{role="decode",reason="prefill_failed",result="dropped"}`] == 2
	}) {
		t.Fatalf("pdlb_aborts_total: %v", metricValues(t, l, "pdlb_aborts_total"))
	}
	sameRids(t, "decode", dm.Stats().Aborted)
}

// An engine that answers 404 to /abort_request is not asked again for
// abortRouteMemory on the request path's clock, then it is.
func TestAbortRouteMissingIsRemembered(t *testing.T) {
	var offset atomic.Int64
	clock := pdlb.Clock{Now: func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }}
	d, dm := stalled(t, mock.RoleDecode, true)
	var sent atomic.Int64 // requests the test has sent
	p := proxytest.NewEngine(t, func(ctx *fasthttp.RequestCtx) {
		failOnceSeen(dm, "/generate", sent.Load(), 500)(ctx) // once the decode has this one too
	})
	l := startLBWith(t, []*proxytest.Engine{p}, []*proxytest.Engine{d}, testLog(t), clock, withAborts(16))
	askedAbort := func() int64 { return dm.Stats().Requests["/abort_request"] }
	post := func() {
		t.Helper()
		sent.Add(1)
		if resp, body := proxytest.Post(t, l.URL+"/generate", `{"text":"hi","rid":"r"}`); resp.StatusCode != 502 {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		proxytest.WaitFor(5*time.Second, func() bool { return l.router.proxy.AbortsInFlight() == 0 })
	}
	post()
	if !proxytest.WaitFor(5*time.Second, func() bool { return askedAbort() == 1 }) {
		t.Fatalf("first abort not sent: %d", askedAbort())
	}
	post()
	offset.Store(int64(9 * time.Minute))
	post()
	if n := askedAbort(); n != 1 {
		t.Errorf("asked %d times within the memory, want once", n)
	}
	offset.Store(int64(10*time.Minute + time.Second))
	post()
	if !proxytest.WaitFor(5*time.Second, func() bool { return askedAbort() == 2 }) {
		t.Errorf("not asked again after the memory: %d", askedAbort())
	}
	v := metricValues(t, l, "pdlb_aborts_total")
	if v[`pdlb_aborts_total{role="decode",reason="prefill_failed",result="not_found"}`] != 2 ||
		v[`pdlb_aborts_total{role="decode",reason="prefill_failed",result="skipped"}`] != 2 {
		t.Errorf("pdlb_aborts_total: %v", v)
	}
}

// An engine started with --admin-api-key that pdlb lacks refuses the abort
// with 401: counted as unauthorized, not as an error of the engine's, and
// not asked again for a minute (every failed request would add an abort
// and a warning).
func TestAbortRefusedForCredentials(t *testing.T) {
	d, dm := mockEngine(t, mock.Options{Role: mock.RoleDecode, StallProb: 1, AdminAPIKey: "engine-admin"})
	var sent atomic.Int64 // requests the test has sent
	p := proxytest.NewEngine(t, func(ctx *fasthttp.RequestCtx) {
		failOnceSeen(dm, "/generate", sent.Load(), 500)(ctx) // once the decode has this one too
	})
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d}, withAborts(16))
	sent.Add(1)
	if resp, body := proxytest.Post(t, l.URL+"/generate", `{"text":"hi","rid":"r"}`); resp.StatusCode != 502 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if !proxytest.WaitFor(5*time.Second, func() bool { return dm.Unauthorized() == 1 && l.router.proxy.AbortsInFlight() == 0 }) {
		t.Fatalf("the decode refused %d aborts", dm.Unauthorized())
	}
	onlyAborts(t, l, `pdlb_aborts_total{role="decode",reason="prefill_failed",result="unauthorized"}`)
	sent.Add(1)
	if resp, body := proxytest.Post(t, l.URL+"/generate", `{"text":"hi","rid":"r2"}`); resp.StatusCode != 502 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if !proxytest.WaitFor(5*time.Second, func() bool {
		return metricValues(t, l, "pdlb_aborts_total")[`pdlb_aborts_total{role="decode",reason="prefill_failed",result="skipped"}`] == 1
	}) {
		t.Fatalf("the second abort was not skipped: %v", metricValues(t, l, "pdlb_aborts_total"))
	}
	if n := dm.Unauthorized(); n != 1 {
		t.Errorf("the engine was asked %d times", n)
	}
}

// The OpenAI routes take rid as /generate does (SGLang's protocol.py), so
// they carry and abort it the same way.
func TestAbortOpenAIRoute(t *testing.T) {
	d, dm := stalled(t, mock.RoleDecode, false)
	p := proxytest.NewEngine(t, failOnceSeen(dm, "/v1/chat/completions", 1, 500))
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d}, withAborts(16))
	resp, body := proxytest.Post(t, l.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 502 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	rid := ridOf(t, dm)
	if !strings.HasPrefix(rid, `"`+resp.Header.Get("X-Request-ID")+"-") {
		t.Fatalf("decode got rid %s", rid)
	}
	sameRids(t, "decode", abortsSettle(t, l, dm, 1), strings.Trim(rid, `"`))
}

// A rid SGLang would refuse is refused before any engine is asked, in
// pdlb's error shape.
func TestBadRidIs400(t *testing.T) {
	e := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	l := startLB(t, []*proxytest.Engine{e}, []*proxytest.Engine{e}, withAborts(16))
	for body, want := range map[string]string{
		`{"text":"a","rid":5}`:                "rid: must be a string or a list of strings, got 5",
		`{"text":["a","b"],"rid":["r"]}`:      "rid: a list of 1 rids for a batch of 2 items",
		`{"text":["a","b"],"rid":["r",true]}`: "rid: item 1 must be a string, got true",
	} {
		resp, out := proxytest.Post(t, l.URL+"/generate", body)
		if resp.StatusCode != 400 || !strings.Contains(errorJSON(t, out), want) {
			t.Errorf("%s: %d %s, want 400 with %q", body, resp.StatusCode, out, want)
		}
	}
	if e.Count() != 0 {
		t.Errorf("the engine was asked %d times", e.Count())
	}
}

// A retry reuses the client's rid: the failed attempt's abort must reach
// the engine before the retry's leg does, or it would end that leg. The
// prefill here takes 300 ms to answer /abort_request; the retry waits.
func TestRetryWithClientRidWaitsForAborts(t *testing.T) {
	pm := mock.New(mock.Options{Role: mock.RolePrefill, PrefillOverhead: 400 * time.Millisecond}, zerolog.Nop())
	t.Cleanup(func() { pm.Shutdown() })
	p := proxytest.NewEngine(t, func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) == "/abort_request" {
			time.Sleep(300 * time.Millisecond)
		}
		pm.Handler(ctx)
	})
	var legs atomic.Int64
	decode := func(ctx *fasthttp.RequestCtx) {
		n := legs.Add(1)
		proxytest.WaitFor(5*time.Second, func() bool { return pm.Stats().Requests["/generate"] >= n })
		if n == 1 {
			proxytest.JSONAnswer(503, `{"error":"busy"}`)(ctx) // retryable
			return
		}
		// Answer once the prefill has: a prefill ended by a late abort
		// fails the request first.
		time.Sleep(600 * time.Millisecond)
		proxytest.JSONAnswer(200, `{"text":"ok"}`)(ctx)
	}
	// Two decodes: the retry leaves the failed one out, and meets the
	// same prefill again.
	d1, d2 := proxytest.NewEngine(t, decode), proxytest.NewEngine(t, decode)
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d1, d2}, withAborts(16), func(c *config.Config) {
		c.Retry.MaxAttempts = 2
	})
	resp, body := proxytest.Post(t, l.URL+"/generate", `{"text":"hi","rid":"again"}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	sameRids(t, "prefill", abortsSettle(t, l, pm, 1), "again")
	noneInFlight(t, l)
	if v := metricValues(t, l, `pdlb_backend_requests_total{role="prefill"`); v[`pdlb_backend_requests_total{role="prefill",url="`+p.URL+`",result="ok"}`] != 1 {
		t.Errorf("the retry's prefill leg did not succeed: %v", v)
	}
}
