package router

import (
	"bufio"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"pdlb/config"
	"pdlb/proxy/proxytest"
)

// hang blocks until the client goes away (the server notices on shutdown
// or when the connection is closed) or until limit.
func hang(limit time.Duration) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		// Peek at the raw connection like an engine waiting for KV: it
		// returns when the peer closes.
		c := ctx.Conn()
		c.SetReadDeadline(time.Now().Add(limit))
		var b [1]byte
		c.Read(b[:])
		ctx.SetStatusCode(200)
		ctx.SetBodyString(`{"late":true}`)
	}
}

func TestPrefillFailureCancelsDecode(t *testing.T) {
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(500, `{"error":"boom"}`))
	d := proxytest.NewEngine(t, hang(10*time.Second))
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d})

	start := time.Now()
	resp, body := proxytest.Post(t, l.URL+"/generate", `{"text":"hi"}`)
	if resp.StatusCode != 502 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if !strings.Contains(body, p.URL) || !strings.Contains(body, "500") {
		t.Errorf("error does not name the prefill and its status: %s", body)
	}
	if resp.Header.Get("X-Request-ID") == "" {
		t.Error("error answer lacks X-Request-ID")
	}
	if !d.WaitClosed(time.Second) {
		t.Fatal("decode connection not closed within 1s of the prefill failure")
	}
	if time.Since(start) > 3*time.Second {
		t.Fatalf("took %v", time.Since(start))
	}
}

func TestPrefill4xxForwardedAsIs(t *testing.T) {
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(400, `{"error":{"message":"bad sampling params"}}`))
	d := proxytest.NewEngine(t, hang(10*time.Second))
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d})
	resp, body := proxytest.Post(t, l.URL+"/generate", `{"text":"hi"}`)
	if resp.StatusCode != 400 || body != `{"error":{"message":"bad sampling params"}}` {
		t.Fatalf("got %d %s", resp.StatusCode, body)
	}
}

func TestPrefillConnectErrorIs502(t *testing.T) {
	dead := &proxytest.Engine{URL: "http://" + proxytest.ClosedAddr(t)}
	d := proxytest.NewEngine(t, hang(10*time.Second))
	l := startLB(t, []*proxytest.Engine{dead}, []*proxytest.Engine{d})
	resp, body := proxytest.Post(t, l.URL+"/generate", `{"text":"hi"}`)
	if resp.StatusCode != 502 || !strings.Contains(body, "connection refused") {
		t.Fatalf("got %d %s", resp.StatusCode, body)
	}
	if !d.WaitClosed(time.Second) {
		t.Fatal("decode not cancelled")
	}
}

func TestDecodeHangIs504WithinTimeout(t *testing.T) {
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	d := proxytest.NewEngine(t, hang(10*time.Second))
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d}, func(c *config.Config) { c.Timeouts.DecodeFirstByte = 300 * time.Millisecond })
	start := time.Now()
	resp, body := proxytest.Post(t, l.URL+"/generate", `{"text":"hi"}`)
	if resp.StatusCode != 504 || !strings.Contains(body, d.URL) {
		t.Fatalf("got %d %s", resp.StatusCode, body)
	}
	if el := time.Since(start); el < 300*time.Millisecond || el > 2*time.Second {
		t.Fatalf("504 after %v, want about 300ms", el)
	}
}

func TestDecodeFailureCancelsPrefill(t *testing.T) {
	p := proxytest.NewEngine(t, hang(10*time.Second))
	d := proxytest.NewEngine(t, proxytest.JSONAnswer(500, `{"error":"boom"}`))
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d})
	resp, body := proxytest.Post(t, l.URL+"/generate", `{"text":"hi"}`)
	if resp.StatusCode != 502 || !strings.Contains(body, "decode "+d.URL) {
		t.Fatalf("got %d %s", resp.StatusCode, body)
	}
	if !p.WaitClosed(time.Second) {
		t.Fatal("prefill connection not closed within 1s of the decode failure")
	}
}

func TestClientDisconnectClosesBothLegs(t *testing.T) {
	leaveWhileBothEnginesWork(t, `{"text":"hi"}`, 0)
}

// TestClientDisconnectDuringTTFTClosesBothLegsOfAStream: a stream request
// whose client leaves before the first token (on its hijacked connection)
// frees both engines too.
func TestClientDisconnectDuringTTFTClosesBothLegsOfAStream(t *testing.T) {
	leaveWhileBothEnginesWork(t, `{"text":"hi","stream":true}`, 100*time.Millisecond) // past the watch delay
}

// leaveWhileBothEnginesWork sends body to pdlb in front of two engines
// that never answer, closes the client connection once both have the
// request (and wait more), and requires both engine connections closed
// within a second.
func leaveWhileBothEnginesWork(t *testing.T, body string, wait time.Duration) {
	t.Helper()
	p := proxytest.NewEngine(t, hang(10*time.Second))
	d := proxytest.NewEngine(t, hang(10*time.Second))
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d})

	conn, err := net.Dial("tcp", strings.TrimPrefix(l.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	conn.Write([]byte("POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body))
	if !proxytest.WaitFor(2*time.Second, func() bool { return p.Count() > 0 && d.Count() > 0 }) {
		t.Fatal("request never reached both backends")
	}
	time.Sleep(wait)
	conn.Close()
	if !p.WaitClosed(time.Second) || !d.WaitClosed(time.Second) {
		t.Fatal("upstream legs not closed within 1s of the client leaving")
	}
}

// sseEngine streams events with a delay, then [DONE], and (keepOpen) never
// ends the body afterwards, like engines that keep the connection open.
func sseEngine(events []string, delay time.Duration, keepOpen bool) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("text/event-stream")
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			for _, ev := range events {
				w.WriteString("data: " + ev + "\n\n")
				if w.Flush() != nil {
					return
				}
				time.Sleep(delay)
			}
			w.WriteString("data: [DONE]\n\n")
			w.Flush()
			if keepOpen {
				time.Sleep(5 * time.Second)
			}
		})
	}
}

func TestStreamRelaysEventByEventAndClosesAtDone(t *testing.T) {
	p := proxytest.NewEngine(t, sseEngine([]string{`{"p":1}`}, 0, false))
	events := []string{`{"text":"a"}`, `{"text":"ab"}`, `{"text":"abc"}`}
	d := proxytest.NewEngine(t, sseEngine(events, 150*time.Millisecond, true))
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d})

	resp, err := http.Post(l.URL+"/generate", "application/json", strings.NewReader(`{"text":"hi","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	r := bufio.NewReader(resp.Body)
	var arrivals []time.Time
	var got []string
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			break
		}
		if strings.HasPrefix(line, "data: ") {
			got = append(got, strings.TrimSpace(strings.TrimPrefix(line, "data: ")))
			arrivals = append(arrivals, time.Now())
		}
	}
	end := time.Now()
	want := append(append([]string{}, events...), "[DONE]")
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("events %q, want %q", got, want)
	}
	// Flushed one by one: the events arrived spread out, not all at once.
	if arrivals[2].Sub(arrivals[0]) < 200*time.Millisecond {
		t.Errorf("events were buffered: %v", arrivals[2].Sub(arrivals[0]))
	}
	// Closed right after [DONE] although the engine keeps its body open 5s.
	if end.Sub(arrivals[len(arrivals)-1]) > time.Second {
		t.Errorf("client stream not closed after [DONE]: %v", end.Sub(arrivals[len(arrivals)-1]))
	}
}

func TestStreamPrefillFailureBeforeFirstEvent(t *testing.T) {
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(500, `{"error":"boom"}`))
	// The decode sends headers at once but its first event only after KV arrives.
	d := proxytest.NewEngine(t, func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("text/event-stream")
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			w.Flush()
			time.Sleep(3 * time.Second)
			w.WriteString("data: {}\n\n")
			w.Flush()
		})
	})
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d})
	start := time.Now()
	resp, body := proxytest.Post(t, l.URL+"/generate", `{"text":"hi","stream":true}`)
	if resp.StatusCode != 502 || !strings.Contains(body, "prefill") {
		t.Fatalf("got %d %s", resp.StatusCode, body)
	}
	if resp.Header.Get("X-Request-ID") == "" || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("stream refusal headers: %v", resp.Header)
	}
	if time.Since(start) > 2*time.Second {
		t.Fatalf("took %v", time.Since(start))
	}
}

func TestStreamFailureAfterFirstByteEndsWithErrorEvent(t *testing.T) {
	p := proxytest.NewEngine(t, sseEngine([]string{`{}`}, 0, false))
	// Die mid-stream: one event, then the connection is cut without the
	// chunked body's terminator.
	d := proxytest.RawEngine(t, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"+
		"14\r\ndata: {\"text\":\"a\"}\n\n\r\n")
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d})
	_, body := proxytest.Post(t, l.URL+"/generate", `{"text":"hi","stream":true}`)
	if !strings.HasPrefix(body, "data: {\"text\":\"a\"}\n\n") || !strings.Contains(body, `data: {"error":`) || !strings.HasSuffix(body, "\n\n") {
		t.Fatalf("body %q", body)
	}
}

func TestOpenAIRoutesUseScalarInjection(t *testing.T) {
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	d := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{"choices":[]}`))
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d})
	for i, path := range []string{"/v1/chat/completions", "/v1/completions"} {
		resp, body := proxytest.Post(t, l.URL+path, `{"prompt":["a","b"],"text":["x","y"],"messages":[]}`)
		if resp.StatusCode != 200 || body != `{"choices":[]}` {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, body)
		}
		if !strings.Contains(string(d.LastBody()), `"bootstrap_host":"127.0.0.1","bootstrap_port":8998,"bootstrap_room":`) ||
			strings.Contains(string(d.LastBody()), `"bootstrap_room":[`) {
			t.Fatalf("%s: not scalar injection: %s", path, d.LastBody())
		}
		// The prefill leg runs concurrently: wait for it to land.
		if !proxytest.WaitFor(time.Second, func() bool { return p.Count() == i+1 }) || p.LastPath() != path {
			t.Fatalf("prefill got %d requests, last path %s", p.Count(), p.LastPath())
		}
	}
}
