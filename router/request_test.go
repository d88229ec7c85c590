package router

import (
	"bytes"
	"encoding/json"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"pdlb/config"
	"pdlb/proxy"
	"pdlb/proxy/proxytest"
)

// TestEveryRequestFinishesOnce: however a fan-out request ends (answered,
// refused by parsing or admission, no backend, an upstream error, a stream
// relayed, a stream whose client left), it writes exactly one log line,
// counts once in pdlb_requests_total with that line's status, and gives
// its admission slot back.
func TestEveryRequestFinishesOnce(t *testing.T) {
	held := make(chan struct{})
	decode := func(ctx *fasthttp.RequestCtx) {
		body := ctx.PostBody()
		switch {
		case bytes.Contains(body, []byte("fail")):
			proxytest.JSONAnswer(500, `{"error":"boom"}`)(ctx)
		case bytes.Contains(body, []byte("hold")):
			<-held
			proxytest.JSONAnswer(200, `{}`)(ctx)
		case bytes.Contains(body, []byte(`"stream":true`)):
			sseEngine([]string{`{"i":1}`, `{"i":2}`}, 0, false)(ctx)
		default:
			proxytest.JSONAnswer(200, `{"ok":1}`)(ctx)
		}
	}
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	d := proxytest.NewEngine(t, decode)
	release := sync.OnceFunc(func() { close(held) })
	t.Cleanup(release) // before the engine's own cleanup, which waits for its handlers
	logs := &proxytest.SyncBuffer{}
	l := startLBWithLog(t, []*proxytest.Engine{p}, []*proxytest.Engine{d}, zerolog.New(logs), func(c *config.Config) {
		c.Limits.MaxConcurrentRequests, c.Limits.QueueSize, c.Limits.QueueTimeout = 1, 0, time.Second
	})
	lines := func() []map[string]any {
		var out []map[string]any
		for _, line := range bytes.Split(bytes.TrimSpace(logs.Bytes()), []byte("\n")) {
			var m map[string]any
			if len(line) > 0 && json.Unmarshal(line, &m) == nil && m["message"] == "request" {
				out = append(out, m)
			}
		}
		return out
	}
	seenLines, seenCount := 0, 0.0
	// check requires exactly one more log line, with status want, one more
	// count in pdlb_requests_total, and the admission slot given back.
	check := func(name string, want int) {
		t.Helper()
		if !proxytest.WaitFor(2*time.Second, func() bool { return len(lines()) > seenLines && l.router.admission.InFlight() == 0 }) {
			t.Fatalf("%s: no log line, or the admission slot is still held (%d)", name, l.router.admission.InFlight())
		}
		time.Sleep(20 * time.Millisecond) // a second line, if any, would come now
		ls := lines()[seenLines:]
		if len(ls) != 1 || ls[0]["status"] != float64(want) {
			t.Fatalf("%s: log lines %v, want one with status %d", name, ls, want)
		}
		n := metricSum(t, l, `pdlb_requests_total{route="/generate"`)
		if n != seenCount+1 {
			t.Fatalf("%s: pdlb_requests_total grew by %v, want 1", name, n-seenCount)
		}
		seenLines, seenCount = seenLines+1, n
	}
	proxytest.Post(t, l.URL+"/generate", `{"text":"hi"}`)
	check("answered", 200)
	proxytest.Post(t, l.URL+"/generate", `{"text":`)
	check("bad JSON", 400)
	proxytest.Post(t, l.URL+"/generate", `{"text":"fail"}`)
	check("upstream 500", 502)
	proxytest.Post(t, l.URL+"/generate", `{"text":"hi","stream":true}`)
	check("stream", 200)
	proxytest.Post(t, l.URL+"/generate", `{"text":"fail","stream":true}`)
	check("stream refused upstream", 502)

	// A stream whose client leaves before its first event.
	conn, err := net.Dial("tcp", strings.TrimPrefix(l.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	body := `{"text":"hold","stream":true}`
	conn.Write([]byte("POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body))
	proxytest.WaitFor(time.Second, func() bool { return d.Count() > 0 && bytes.Contains(d.LastBody(), []byte("hold")) })
	// While it holds the only slot, the next request is refused.
	proxytest.Post(t, l.URL+"/generate", `{"text":"hi"}`)
	if ls := lines()[seenLines:]; len(ls) != 1 || ls[0]["status"] != 429.0 {
		t.Fatalf("beyond the admission limit: %v", ls)
	}
	seenLines, seenCount = seenLines+1, metricSum(t, l, `pdlb_requests_total{route="/generate"`)
	time.Sleep(100 * time.Millisecond) // past the client watch's delay
	conn.Close()
	check("stream client gone", statusClientGone)
	release() // only now: a decode answering earlier would end the request otherwise

	// No backend at all for the prefill.
	l.pool.Backends(proxy.Prefill)[0].SetHealthy(false)
	proxytest.Post(t, l.URL+"/generate", `{"text":"hi"}`)
	check("no backend", 503)
}
