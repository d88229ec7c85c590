package proxy

import (
	"bufio"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valyala/bytebufferpool"
	"github.com/valyala/fasthttp"

	"pdlb/proxy/proxytest"
)

// attemptDone waits until neither the request nor the prefill's goroutine
// holds the attempt: everything the prefill goroutine did is then seen.
func attemptDone(t *testing.T, a *attempt) {
	t.Helper()
	if !proxytest.WaitFor(2*time.Second, func() bool { return a.refs.Load() == 0 }) {
		t.Fatalf("attempt still held by %d", a.refs.Load())
	}
}

func TestDoAnswersTheDecodesBody(t *testing.T) {
	const (
		prefillAnswer = `{"text":"","meta_info":{"input_token_logprobs":[[null,1,null],[-1.5,2,null]]}}`
		decodeAnswer  = `{"text":"b","meta_info":{"input_token_logprobs":[[-0.5,3,null]]}}`
	)
	for _, tc := range []struct {
		name  string
		merge bool
		want  string
	}{
		{"as the decode answered", false, decodeAnswer},
		{"prefill logprobs merged in front", true,
			`{"text":"b","meta_info":{"input_token_logprobs":[[null,1,null],[-1.5,2,null],[-0.5,3,null]]}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pe := proxytest.NewEngine(t, proxytest.JSONAnswer(200, prefillAnswer))
			de := proxytest.NewEngine(t, proxytest.JSONAnswer(200, decodeAnswer))
			pr := newPDPair(t, pe.URL, de.URL)
			x := pr.exchange(t, false)
			x.MergeLogprobs = tc.merge
			ans, err := pr.px.Do(x)
			if err != nil {
				t.Fatal(err)
			}
			if ans.Stream != nil || ans.Status != 200 || string(ans.ContentType) != "application/json" || string(ans.Body) != tc.want {
				t.Fatalf("answer %d %q stream=%v\n%s\nwant 200 application/json\n%s", ans.Status, ans.ContentType, ans.Stream != nil, ans.Body, tc.want)
			}
			ans.Release()
			pr.settled(t) // the prefill may still be on its way without a merge
			for _, leg := range []struct {
				e    *proxytest.Engine
				body string
			}{{pe, prefillBody}, {de, decodeBody}} {
				if got := string(leg.e.LastBody()); got != leg.body || leg.e.LastPath() != "/generate" || leg.e.LastID() != "req-7" {
					t.Errorf("engine got %s %q (id %q), want /generate %q (id req-7)", leg.e.LastPath(), got, leg.e.LastID(), leg.body)
				}
			}
			if p, d := outcomesOf(pr.p), outcomesOf(pr.d); p != (outcomes{ok: 1}) || d != (outcomes{ok: 1}) {
				t.Errorf("breakers told prefill %+v, decode %+v, want one success each", p, d)
			}
			if p, d := idleConns(pr.p), idleConns(pr.d); p != 1 || d != 1 {
				t.Errorf("pooled connections: prefill %d, decode %d, want 1 each", p, d)
			}
		})
	}
}

// TestBodyBufferReturnsOnceBothLegsAreDone: the buffer holding the injected
// bodies goes back to its pool when the last leg lets go of it, and not
// before: the prefill may still be sending it after the decode answered.
func TestBodyBufferReturnsOnceBothLegsAreDone(t *testing.T) {
	exchange := func(t *testing.T, pr *pdPair) (*Exchange, *bytebufferpool.ByteBuffer) {
		buf := bytebufferpool.Get()
		buf.B = append(append(buf.B[:0], prefillBody...), decodeBody...)
		x := pr.exchange(t, false)
		x.Buffer = buf
		x.PrefillBody, x.DecodeBody = buf.B[:len(prefillBody)], buf.B[len(prefillBody):]
		return x, buf
	}
	t.Run("prefill done first", func(t *testing.T) {
		pe := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
		de := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{"text":"b"}`))
		pr := newPDPair(t, pe.URL, de.URL)
		x, buf := exchange(t, pr)
		ans, err := pr.px.Do(x)
		if err != nil {
			t.Fatal(err)
		}
		// Let the prefill's goroutine let go first, so that the release
		// below, on this goroutine, is the last one.
		if !proxytest.WaitFor(2*time.Second, func() bool { return ans.a.refs.Load() == 1 }) {
			t.Fatal("the prefill's goroutine never finished")
		}
		if buf.Len() == 0 {
			t.Fatal("buffer returned while the answer still pointed into the attempt")
		}
		ans.Release()
		if buf.Len() != 0 {
			t.Fatalf("buffer not returned (still %d bytes) once both legs were done", buf.Len())
		}
	})
	t.Run("prefill still working", func(t *testing.T) {
		release := make(chan struct{})
		pe := proxytest.NewEngine(t, func(ctx *fasthttp.RequestCtx) { <-release; ctx.SetBodyString(`{}`) })
		de := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{"text":"b"}`))
		open := releaser(t, release)
		pr := newPDPair(t, pe.URL, de.URL)
		x, buf := exchange(t, pr)
		ans, err := pr.px.Do(x)
		if err != nil {
			t.Fatal(err)
		}
		a := ans.a
		ans.Release()
		if got := string(buf.B); got != prefillBody+decodeBody {
			t.Fatalf("buffer reused while the prefill's leg held it: %q", got)
		}
		open()
		attemptDone(t, a)
	})
}

// TestPrefillFailureCutsTheDecodeLeg: a prefill that fails while the
// decode waits for its KV ends the attempt with the prefill's error, and
// the decode's connection is closed at once (SGLang's own balancer leaves
// that decode waiting for minutes).
func TestPrefillFailureCutsTheDecodeLeg(t *testing.T) {
	for _, tc := range []struct {
		name       string
		stream     bool
		status     int
		body       string
		retryAfter string
		client     int
		retryable  bool
		prefill    outcomes
	}{
		{"503 overloaded", false, 503, `{"error":"overloaded"}`, "2", 502, true, outcomes{failed: 1}},
		{"500", false, 500, `{"error":"crashed"}`, "", 502, false, outcomes{failed: 1}},
		{"400 is the client's", false, 400, `{"error":"prompt too long"}`, "", 400, false, outcomes{ok: 1}},
		{"500 to a stream", true, 500, `{"error":"crashed"}`, "", 502, false, outcomes{failed: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			de, decodeWaits := holdingEngine(t)
			head := "HTTP/1.1 " + strconv.Itoa(tc.status) + " X\r\nContent-Type: application/json\r\n"
			if tc.retryAfter != "" {
				head += "Retry-After: " + tc.retryAfter + "\r\n"
			}
			pe := proxytest.ConnEngine(t, func(c net.Conn, br *bufio.Reader, _ []byte) {
				select {
				case <-decodeWaits:
				case <-time.After(2 * time.Second):
				}
				c.Write([]byte(head + "Content-Length: " + strconv.Itoa(len(tc.body)) + "\r\n\r\n" + tc.body))
				io.Copy(io.Discard, br)
			})
			pr := newPDPair(t, pe.URL, de.URL)
			start := time.Now()
			ans, err := pr.px.Do(pr.exchange(t, tc.stream))
			if err == nil {
				t.Fatalf("answer %+v, want the prefill's error", ans)
			}
			if err.Backend != pr.p || err.Kind != KindStatus || err.Status != tc.status || string(err.Body) != tc.body ||
				string(err.RetryAfter) != tc.retryAfter || string(err.ContentType) != "application/json" {
				t.Fatalf("error %s %s %d %q retry-after %q %q, want the prefill's %d %q",
					err.Backend.Role, err.Kind, err.Status, err.Body, err.RetryAfter, err.ContentType, tc.status, tc.body)
			}
			if err.ClientStatus() != tc.client || err.Retryable() != tc.retryable {
				t.Errorf("client status %d retryable %v, want %d %v", err.ClientStatus(), err.Retryable(), tc.client, tc.retryable)
			}
			if !de.WaitClosed(time.Second) {
				t.Fatal("the decode's connection was left open")
			}
			if el := time.Since(start); el > 2*time.Second {
				t.Errorf("Do took %v", el)
			}
			// Both tickets are settled by the time Do returns.
			if pr.p.InFlight() != 0 || pr.d.InFlight() != 0 {
				t.Fatalf("in flight: prefill %d, decode %d", pr.p.InFlight(), pr.d.InFlight())
			}
			if p, d := outcomesOf(pr.p), outcomesOf(pr.d); p != tc.prefill || d != (outcomes{excluded: 1}) {
				t.Errorf("breakers told prefill %+v, decode %+v, want %+v and the cut decode excluded", p, d, tc.prefill)
			}
		})
	}
}

// TestDecodeFailureCutsThePrefillLeg: a decode that fails before its first
// byte ends the attempt with its own error, and the prefill's connection
// is closed: the retry sends both legs to a new pair.
func TestDecodeFailureCutsThePrefillLeg(t *testing.T) {
	answer := func(raw string) func(net.Conn) { return func(c net.Conn) { c.Write([]byte(raw)) } }
	for _, tc := range []struct {
		name string
		// answer writes the decode's answer; nil: nothing listens.
		answer    func(net.Conn)
		kind      Kind
		status    int
		client    int
		retryable bool
		decode    outcomes
	}{
		{"500", answer("HTTP/1.1 500 Internal Server Error\r\nContent-Length: 7\r\n\r\ncrashed"), KindStatus, 500, 502, false, outcomes{failed: 1}},
		{"503", answer("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy"), KindStatus, 503, 502, true, outcomes{failed: 1}},
		{"400 is the client's", answer("HTTP/1.1 400 Bad Request\r\nContent-Length: 3\r\n\r\nbad"), KindStatus, 400, 400, false, outcomes{ok: 1}},
		{"not HTTP", answer("garbage\r\n\r\n"), KindProtocol, 0, 502, false, outcomes{failed: 1}},
		{"closed without answering", func(net.Conn) {}, KindConnect, 0, 502, true, outcomes{failed: 1}},
		{"connection refused", nil, KindConnect, 0, 502, true, outcomes{failed: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pe, prefillWorks := holdingEngine(t)
			decodeURL := closedPortURL(t)
			if tc.answer != nil {
				decodeURL = proxytest.ConnEngine(t, func(c net.Conn, _ *bufio.Reader, _ []byte) {
					select {
					case <-prefillWorks:
					case <-time.After(2 * time.Second):
					}
					tc.answer(c)
				}).URL
			}
			pr := newPDPair(t, pe.URL, decodeURL)
			_, err := pr.px.Do(pr.exchange(t, false))
			if err == nil {
				t.Fatal("Do succeeded")
			}
			if err.Backend != pr.d || err.Kind != tc.kind || err.Status != tc.status {
				t.Fatalf("error %s %s %d (%v), want the decode's %s %d", err.Backend.Role, err.Kind, err.Status, err, tc.kind, tc.status)
			}
			if err.ClientStatus() != tc.client || err.Retryable() != tc.retryable {
				t.Errorf("client status %d retryable %v, want %d %v", err.ClientStatus(), err.Retryable(), tc.client, tc.retryable)
			}
			if !pe.WaitClosed(time.Second) {
				t.Fatal("the prefill's connection was left open")
			}
			pr.settled(t)
			if p, d := outcomesOf(pr.p), outcomesOf(pr.d); p != (outcomes{excluded: 1}) || d != tc.decode {
				t.Errorf("breakers told prefill %+v, decode %+v, want the cut prefill excluded and %+v", p, d, tc.decode)
			}
		})
	}
}

// TestDecodeFirstByteTimeout: a decode silent for timeouts.decode_first_byte
// is a 504 that cuts the prefill. The attempt's clock starts it almost
// that long ago, so the deadline is reached without waiting it out.
func TestDecodeFirstByteTimeout(t *testing.T) {
	pe, _ := holdingEngine(t)
	de, decodeGotIt := holdingEngine(t)
	pr := newPDPair(t, pe.URL, de.URL)
	to := testTimeouts()
	to.PrefillFirstByte = time.Hour
	pr.px.SetTimeouts(to)
	pr.clock.shift(-to.DecodeFirstByte + 50*time.Millisecond)
	_, err := pr.px.Do(pr.exchange(t, false))
	if err == nil || err.Backend != pr.d || err.Kind != KindTimeout || err.ClientStatus() != 504 || !err.Retryable() {
		t.Fatalf("error %v, want the decode's timeout (504, retryable)", err)
	}
	if !strings.Contains(err.Error(), "decode "+pr.d.URL+" timed out") {
		t.Errorf("message %q", err.Error())
	}
	waitOn(t, decodeGotIt, "the decode's request")
	if !pe.WaitClosed(time.Second) || !de.WaitClosed(time.Second) {
		t.Fatal("a leg's connection was left open")
	}
	pr.settled(t)
	if p, d := outcomesOf(pr.p), outcomesOf(pr.d); p != (outcomes{excluded: 1}) || d != (outcomes{failed: 1}) {
		t.Errorf("breakers told prefill %+v, decode %+v", p, d)
	}
}

// TestRequestDeadlineBoundsBothLegs: Exchange.Deadline (timeouts.request)
// ends the attempt even when the leg timeouts are longer.
func TestRequestDeadlineBoundsBothLegs(t *testing.T) {
	pe, _ := holdingEngine(t)
	de, _ := holdingEngine(t)
	pr := newPDPair(t, pe.URL, de.URL)
	x := pr.exchange(t, false)
	x.Deadline = time.Now().Add(30 * time.Millisecond)
	start := time.Now()
	_, err := pr.px.Do(x)
	if err == nil || err.Kind != KindTimeout {
		t.Fatalf("error %v, want a timeout", err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("Do took %v for a 30ms deadline", el)
	}
	if !pe.WaitClosed(time.Second) || !de.WaitClosed(time.Second) {
		t.Fatal("a leg's connection was left open")
	}
	pr.settled(t)
}

// TestDecodeAnswerCommitsWhileThePrefillStillWorks: a non-streamed decode
// answer is the client's as soon as it is read; the prefill still working
// is left to finish (not cut), and its outcome still reaches its breaker.
func TestDecodeAnswerCommitsWhileThePrefillStillWorks(t *testing.T) {
	for _, tc := range []struct {
		name    string
		status  int
		prefill outcomes
		warned  bool
	}{
		{"prefill finishes", 200, outcomes{ok: 1}, false},
		{"prefill fails after the commit", 500, outcomes{failed: 1}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			prefillWorks := make(chan struct{}, 1)
			pe := proxytest.NewEngine(t, func(ctx *fasthttp.RequestCtx) {
				prefillWorks <- struct{}{}
				<-release
				ctx.SetStatusCode(tc.status)
				ctx.SetBodyString(`{"meta_info":{}}`)
			})
			de := proxytest.NewEngine(t, func(ctx *fasthttp.RequestCtx) {
				select {
				case <-prefillWorks:
				case <-time.After(2 * time.Second):
				}
				proxytest.JSONAnswer(200, `{"text":"b"}`)(ctx)
			})
			open := releaser(t, release)
			pr := newPDPair(t, pe.URL, de.URL)
			ans, err := pr.px.Do(pr.exchange(t, false))
			if err != nil {
				t.Fatal(err)
			}
			if string(ans.Body) != `{"text":"b"}` {
				t.Fatalf("answer %q", ans.Body)
			}
			a := ans.a
			ans.Release()
			if pr.p.InFlight() != 1 {
				t.Fatal("the prefill's leg ended with the decode's answer")
			}
			if d := outcomesOf(pr.d); d != (outcomes{ok: 1}) {
				t.Errorf("decode breaker told %+v at the commit", d)
			}
			open()
			attemptDone(t, a)
			if p := outcomesOf(pr.p); p != tc.prefill {
				t.Errorf("prefill breaker told %+v, want %+v (a cut leg would be excluded)", p, tc.prefill)
			}
			if idleConns(pr.p) != 1 {
				t.Error("the prefill's connection was not pooled after its answer")
			}
			warned := strings.Contains(string(pr.log.Bytes()), "prefill failed after the decode committed")
			if warned != tc.warned {
				t.Errorf("warning logged: %v, want %v (log %s)", warned, tc.warned, pr.log.Bytes())
			}
		})
	}
}

// TestStreamCommitsOnTheDecodesFirstEvent: a stream is the client's once the
// decode's first event has arrived (not its whole answer); its ticket is
// settled when the relay ends.
func TestStreamCommitsOnTheDecodesFirstEvent(t *testing.T) {
	more := make(chan struct{})
	pe := sseEngine(t, "data: {}\n\ndata: [DONE]\n\n")
	de := proxytest.ConnEngine(t, func(c net.Conn, br *bufio.Reader, _ []byte) {
		c.Write([]byte(sseHead + chunk("data: {\"text\":\"a\"}\n\n")))
		<-more
		c.Write([]byte(chunk("data: [DONE]\n\n") + lastChunk))
		io.Copy(io.Discard, br)
	})
	open := releaser(t, more)
	pr := newPDPair(t, pe.URL, de.URL)
	ans, err := pr.px.Do(pr.exchange(t, true))
	if err != nil {
		t.Fatal(err)
	}
	if ans.Stream == nil || ans.Status != 200 || string(ans.ContentType) != "text/event-stream" {
		t.Fatalf("answer %d %q stream=%v", ans.Status, ans.ContentType, ans.Stream != nil)
	}
	if pr.d.InFlight() != 1 || outcomesOf(pr.d) != (outcomes{}) {
		t.Fatal("the decode's ticket was settled before its stream ended")
	}
	open()
	w := &clientRecorder{}
	res := relay(t, ans.Stream, w)
	if writes, _ := w.got(); res.Err != nil || strings.Join(writes, "") != "data: {\"text\":\"a\"}\n\ndata: [DONE]\n\n" {
		t.Fatalf("relay %+v, client got %q", res, writes)
	}
	pr.settled(t)
	if d := outcomesOf(pr.d); d != (outcomes{ok: 1}) {
		t.Errorf("decode breaker told %+v", d)
	}
}

// TestStreamDecodeFailsBeforeItsFirstEvent: a decode whose stream breaks
// before any event, or that answers a stream request with something else,
// is a failed decode, and the prefill is cut.
func TestStreamDecodeFailsBeforeItsFirstEvent(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer string
		cause  string
	}{
		{"not an event stream", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
			`content type "application/json"`},
		{"body ends before an event", sseHead + lastChunk, "unexpected EOF"},
		{"only blank lines", sseHead + chunk("\n\n\n\n") + lastChunk, "unexpected EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pe, prefillWorks := holdingEngine(t)
			de := proxytest.ConnEngine(t, func(c net.Conn, br *bufio.Reader, _ []byte) {
				select {
				case <-prefillWorks:
				case <-time.After(2 * time.Second):
				}
				c.Write([]byte(tc.answer))
				io.Copy(io.Discard, br)
			})
			pr := newPDPair(t, pe.URL, de.URL)
			_, err := pr.px.Do(pr.exchange(t, true))
			if err == nil || err.Backend != pr.d || err.Kind != KindProtocol || err.ClientStatus() != 502 {
				t.Fatalf("error %v, want the decode's protocol error", err)
			}
			if !strings.Contains(err.Error(), tc.cause) {
				t.Errorf("message %q does not say %q", err.Error(), tc.cause)
			}
			if !pe.WaitClosed(time.Second) || !de.WaitClosed(time.Second) {
				t.Fatal("a leg's connection was left open")
			}
			pr.settled(t)
			if p, d := outcomesOf(pr.p), outcomesOf(pr.d); p != (outcomes{excluded: 1}) || d != (outcomes{failed: 1}) {
				t.Errorf("breakers told prefill %+v, decode %+v", p, d)
			}
		})
	}
}

// TestPrefillStreamIsReadToItsEnd: the prefill's stream of a streamed
// request is read to [DONE] (an engine whose client hangs up aborts the
// request) and its connection pooled when the body ended there too.
func TestPrefillStreamIsReadToItsEnd(t *testing.T) {
	for _, tc := range []struct {
		name   string
		body   string // after the head
		pooled bool
	}{
		{"[DONE] and the body's end", chunk("data: {\"a\":1}\n\n") + chunk("data: {\"a\":2}\n\ndata: [DONE]\n\n") + lastChunk, true},
		{"body kept open after [DONE]", chunk("data: {\"a\":1}\n\ndata: [DONE]\n\n"), false},
		{"body ends without [DONE]", chunk("data: {\"a\":1}\n\n") + lastChunk, true},
	} {
		for _, merge := range []bool{false, true} {
			name := tc.name
			if merge {
				name += ", logprobs merged"
			}
			t.Run(name, func(t *testing.T) {
				pe := proxytest.ConnEngine(t, func(c net.Conn, br *bufio.Reader, _ []byte) {
					c.Write([]byte(sseHead + tc.body))
					io.Copy(io.Discard, br)
				})
				de := sseEngine(t, "data: {\"text\":\"b\"}\n\ndata: [DONE]\n\n")
				pr := newPDPair(t, pe.URL, de.URL)
				x := pr.exchange(t, true)
				x.MergeLogprobs = merge
				ans, err := pr.px.Do(x)
				if err != nil {
					t.Fatal(err)
				}
				a := ans.a
				if res := relay(t, ans.Stream, &clientRecorder{}); res.Err != nil {
					t.Fatal(res.Err)
				}
				attemptDone(t, a)
				if p := outcomesOf(pr.p); p != (outcomes{ok: 1}) {
					t.Errorf("prefill breaker told %+v", p)
				}
				if got := idleConns(pr.p) == 1; got != tc.pooled {
					t.Errorf("prefill connection pooled: %v, want %v", got, tc.pooled)
				}
				if !tc.pooled && !pe.WaitClosed(time.Second) {
					t.Error("the prefill's connection was neither pooled nor closed")
				}
			})
		}
	}
}
