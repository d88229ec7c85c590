package proxy

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"pdlb/proxy/proxytest"
)

// streamFrom commits a streamed attempt whose decode is handle (a raw
// engine writing SSE) and whose prefill streams one event and [DONE].
func streamFrom(t *testing.T, handle func(c net.Conn, br *bufio.Reader)) (*pdPair, *proxytest.Engine, *Answer) {
	t.Helper()
	pe := sseEngine(t, "data: {}\n\ndata: [DONE]\n\n")
	de := proxytest.ConnEngine(t, func(c net.Conn, br *bufio.Reader, _ []byte) { handle(c, br) })
	pr := newPDPair(t, pe.URL, de.URL)
	ans, err := pr.px.Do(pr.exchange(t, true))
	if err != nil {
		t.Fatal(err)
	}
	return pr, de, ans
}

// TestRelaySendsEachEventAsItArrives: however the engine's writes cut the
// stream (an event split across reads, several events in one read), the
// client gets one event per write and a flush after each, as soon as the
// event is complete.
func TestRelaySendsEachEventAsItArrives(t *testing.T) {
	w := &clientRecorder{flushed: make(chan struct{}, 16)}
	pr, _, ans := streamFrom(t, func(c net.Conn, br *bufio.Reader) {
		c.Write([]byte(sseHead + chunk("data: 1\n\n")))
		// The second event waits until the client has the first: the
		// relay must not hold an event back for more.
		select {
		case <-w.flushed:
		case <-time.After(2 * time.Second):
			return
		}
		// An event cut inside its data and inside its boundary, then three
		// events and the body's end in one write.
		for _, part := range []string{chunk("data: {\"b\""), chunk(":2}\n"), chunk("\ndata: 3\n\ndata: 4\n\ndata: [DONE]\n\n") + lastChunk} {
			time.Sleep(5 * time.Millisecond) // separate reads, most likely
			c.Write([]byte(part))
		}
		io.Copy(io.Discard, br)
	})
	res := relay(t, ans.Stream, w)
	want := []string{"data: 1\n\n", "data: {\"b\":2}\n\n", "data: 3\n\n", "data: 4\n\n", "data: [DONE]\n\n"}
	writes, flushes := w.got()
	if strings.Join(writes, "|") != strings.Join(want, "|") || flushes != len(want) {
		t.Fatalf("client got %q in %d flushes, want %q, one flush each", writes, flushes, want)
	}
	bytes := 0
	for _, ev := range want {
		bytes += len(ev)
	}
	if res.Err != nil || res.Events != len(want) || res.Bytes != bytes {
		t.Fatalf("result %+v, want %d events, %d bytes, no error", res, len(want), bytes)
	}
	pr.settled(t)
	if d := outcomesOf(pr.d); d != (outcomes{ok: 1}) {
		t.Errorf("decode breaker told %+v", d)
	}
	if idleConns(pr.d) != 1 {
		t.Error("the decode's connection was not pooled after a clean end")
	}
}

// TestRelayCleanEnds: [DONE] ends the client's stream even when the engine
// keeps its body open; a body that simply ends is a clean end too. The
// connection is pooled only when the engine's body ended.
func TestRelayCleanEnds(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer string
		events []string
		pooled bool
	}{
		{"[DONE] and the body's end", sseHead + chunk("data: a\n\n") + chunk("data: [DONE]\n\n") + lastChunk,
			[]string{"data: a\n\n", "data: [DONE]\n\n"}, true},
		{"body kept open after [DONE]", sseHead + chunk("data: a\n\n") + chunk("data: [DONE]\n\n"),
			[]string{"data: a\n\n", "data: [DONE]\n\n"}, false},
		{"bytes after [DONE]", sseHead + chunk("data: a\n\ndata: [DONE]\n\n: trailing comment\n\n") + lastChunk,
			[]string{"data: a\n\n", "data: [DONE]\n\n"}, false},
		{"body ends without [DONE]", sseHead + chunk("data: a\n\ndata: b\n\n") + lastChunk,
			[]string{"data: a\n\n", "data: b\n\n"}, true},
		{"unterminated last event", sseHead + chunk("data: a\n\ndata: b") + lastChunk,
			[]string{"data: a\n\n", "data: b\n\n"}, true},
		{"Content-Length body", sseFixed("data: a\n\ndata: b\n\ndata: [DONE]\n\n"),
			[]string{"data: a\n\n", "data: b\n\n", "data: [DONE]\n\n"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pr, de, ans := streamFrom(t, func(c net.Conn, br *bufio.Reader) {
				c.Write([]byte(tc.answer))
				io.Copy(io.Discard, br) // held open until pdlb closes it
			})
			w := &clientRecorder{}
			res := relay(t, ans.Stream, w)
			writes, _ := w.got()
			if res.Err != nil || strings.Join(writes, "|") != strings.Join(tc.events, "|") || res.Events != len(tc.events) {
				t.Fatalf("result %+v, client got %q, want %q", res, writes, tc.events)
			}
			pr.settled(t)
			if d := outcomesOf(pr.d); d != (outcomes{ok: 1}) {
				t.Errorf("decode breaker told %+v", d)
			}
			if got := idleConns(pr.d) == 1; got != tc.pooled {
				t.Fatalf("decode connection pooled: %v, want %v", got, tc.pooled)
			}
			if !tc.pooled && !de.WaitClosed(time.Second) {
				t.Fatal("the decode's connection was neither pooled nor closed")
			}
		})
	}
}

// sseErrorEvent decodes the error event pdlb ends a broken stream with.
func sseErrorEvent(t *testing.T, ev string) proxytest.ErrorBody {
	t.Helper()
	var body proxytest.ErrorBody
	data, ok := strings.CutPrefix(ev, "data: ")
	if !ok || !strings.HasSuffix(data, "\n\n") || json.Unmarshal([]byte(data), &body) != nil {
		t.Fatalf("last event %q is not pdlb's error event", ev)
	}
	return body
}

// TestRelayDecodeBreakEndsWithAnErrorEvent: once the client has events,
// a decode failure can no longer become an error status: the stream ends
// with an SSE error event that names the decode.
func TestRelayDecodeBreakEndsWithAnErrorEvent(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after string // what the engine writes after the first event
		cause string
	}{
		{"connection closed mid-body", "", "stream broke off: unexpected EOF"},
		{"broken chunk framing", "zz\r\nnot a chunk\r\n", "protocol"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pr, de, ans := streamFrom(t, func(c net.Conn, _ *bufio.Reader) {
				c.Write([]byte(sseHead + chunk("data: a\n\n") + tc.after))
			})
			w := &clientRecorder{}
			res := relay(t, ans.Stream, w)
			var uerr *UpstreamError
			if !errors.As(res.Err, &uerr) || uerr.Backend != pr.d || uerr.Kind != KindProtocol {
				t.Fatalf("result error %v, want the decode's protocol error", res.Err)
			}
			writes, flushes := w.got()
			if len(writes) != 2 || writes[0] != "data: a\n\n" || flushes != 2 || res.Events != 1 {
				t.Fatalf("client got %q in %d flushes (%d events), want the event and an error event", writes, flushes, res.Events)
			}
			body := sseErrorEvent(t, writes[1])
			if msg := body.Error.Message; !strings.HasPrefix(msg, "decode "+pr.d.URL+" ") || !strings.Contains(msg, tc.cause) ||
				body.Error.Code != 502 || body.Error.Type != "upstream_error" {
				t.Fatalf("error event %+v, want a 502 upstream_error naming the decode and %q", body.Error, tc.cause)
			}
			if res.Bytes != len(writes[0])+len(writes[1]) {
				t.Errorf("result counts %d bytes, client got %d", res.Bytes, len(writes[0])+len(writes[1]))
			}
			pr.settled(t)
			if d := outcomesOf(pr.d); d != (outcomes{failed: 1}) {
				t.Errorf("decode breaker told %+v", d)
			}
			if idleConns(pr.d) != 0 || !de.WaitClosed(time.Second) {
				t.Fatal("a broken decode connection was pooled or left open")
			}
		})
	}
}

// TestRelayIdleTimeoutEndsAStalledStream: a decode silent for
// timeouts.decode_idle between events ends the stream with a timeout
// error event. The relay's clock is moved back past decode_idle once the
// stream is committed, so the wait for the next event is already over.
func TestRelayIdleTimeoutEndsAStalledStream(t *testing.T) {
	pr, de, ans := streamFrom(t, func(c net.Conn, br *bufio.Reader) {
		c.Write([]byte(sseHead + chunk("data: a\n\n")))
		io.Copy(io.Discard, br) // stalls
	})
	pr.clock.shift(-pr.px.Timeouts().DecodeIdle - time.Second)
	w := &clientRecorder{}
	res := relay(t, ans.Stream, w)
	var uerr *UpstreamError
	if !errors.As(res.Err, &uerr) || uerr.Backend != pr.d || uerr.Kind != KindTimeout {
		t.Fatalf("result error %v, want the decode's timeout", res.Err)
	}
	writes, _ := w.got()
	if len(writes) != 2 || writes[0] != "data: a\n\n" {
		t.Fatalf("client got %q", writes)
	}
	if body := sseErrorEvent(t, writes[1]); body.Error.Code != 504 || !strings.HasPrefix(body.Error.Message, "decode "+pr.d.URL+" timed out") {
		t.Fatalf("error event %+v, want a 504 naming the decode", body.Error)
	}
	if !de.WaitClosed(time.Second) {
		t.Fatal("the stalled decode's connection was left open")
	}
	pr.settled(t)
	if d := outcomesOf(pr.d); d != (outcomes{failed: 1}) {
		t.Errorf("decode breaker told %+v", d)
	}
}

// TestRelayClientGone: a client write or flush that fails ends the relay
// with ErrClientGone and closes the decode's connection; the decode is
// not blamed.
func TestRelayClientGone(t *testing.T) {
	for _, tc := range []struct {
		name   string
		w      *clientRecorder
		events int
	}{
		{"first write fails", &clientRecorder{failWrite: 1}, 0},
		{"second flush fails", &clientRecorder{failFlush: 2}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pr, de, ans := streamFrom(t, func(c net.Conn, br *bufio.Reader) {
				c.Write([]byte(sseHead + chunk("data: a\n\n") + chunk("data: b\n\n")))
				io.Copy(io.Discard, br)
			})
			res := relay(t, ans.Stream, tc.w)
			if !errors.Is(res.Err, ErrClientGone) || res.Events != tc.events {
				t.Fatalf("result %+v, want ErrClientGone after %d events", res, tc.events)
			}
			if !de.WaitClosed(time.Second) {
				t.Fatal("the decode's connection was left open")
			}
			pr.settled(t)
			if d := outcomesOf(pr.d); d != (outcomes{excluded: 1}) {
				t.Errorf("decode breaker told %+v, want the departed client's stream excluded", d)
			}
			if idleConns(pr.d) != 0 {
				t.Error("an unfinished stream's connection was pooled")
			}
		})
	}
}

// TestRelayMergesThePrefillLogprobs: with logprobs merged, every decode
// event carries the prefill's input_token_logprobs in front of its own;
// [DONE] and events without logprobs pass unchanged. The prefill's stream
// may come chunked or with a Content-Length (whose last read brings the
// body's end with the bytes).
func TestRelayMergesThePrefillLogprobs(t *testing.T) {
	const prefillEvents = "data: {\"meta_info\":{\"input_token_logprobs\":[[null,1,null]]}}\n\ndata: [DONE]\n\n"
	for _, tc := range []struct {
		name    string
		prefill string
	}{
		{"chunked prefill stream", sseHead + chunk(prefillEvents) + lastChunk},
		{"Content-Length prefill stream", sseFixed(prefillEvents)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pe := proxytest.ConnEngine(t, func(c net.Conn, br *bufio.Reader, _ []byte) {
				c.Write([]byte(tc.prefill))
				io.Copy(io.Discard, br)
			})
			de := proxytest.ConnEngine(t, func(c net.Conn, br *bufio.Reader, _ []byte) {
				c.Write([]byte(sseHead +
					chunk("data: {\"text\":\"a\",\"meta_info\":{\"input_token_logprobs\":[[-0.5,3,null]]}}\n\n") +
					chunk("data: {\"text\":\"ab\"}\n\n") +
					chunk("data: [DONE]\n\n") + lastChunk))
				io.Copy(io.Discard, br)
			})
			pr := newPDPair(t, pe.URL, de.URL)
			x := pr.exchange(t, true)
			x.MergeLogprobs = true
			ans, err := pr.px.Do(x)
			if err != nil {
				t.Fatal(err)
			}
			w := &clientRecorder{}
			if res := relay(t, ans.Stream, w); res.Err != nil {
				t.Fatal(res.Err)
			}
			want := []string{
				"data: {\"text\":\"a\",\"meta_info\":{\"input_token_logprobs\":[[null,1,null],[-0.5,3,null]]}}\n\n",
				"data: {\"text\":\"ab\"}\n\n",
				"data: [DONE]\n\n",
			}
			if writes, _ := w.got(); strings.Join(writes, "|") != strings.Join(want, "|") {
				t.Fatalf("client got\n%q\nwant\n%q", writes, want)
			}
		})
	}
}
