package router

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"
	"github.com/valyala/fasthttp"

	"pdlb/bench/mock"
	"pdlb/config"
	"pdlb/proxy"
	"pdlb/proxy/proxytest"
)

// Faults an engine (or the network in front of it) can throw at pdlb, on
// real loopback sockets. Each test checks the client's answer, that the
// upstream connection was let go, and what the breakers and metrics say.

// untilPeerCloses blocks until the other side closes the connection (or limit).
func untilPeerCloses(c net.Conn, br *bufio.Reader, limit time.Duration) {
	c.SetReadDeadline(time.Now().Add(limit))
	io.Copy(io.Discard, br)
}

const sseHead = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"

// chunk frames s as one HTTP/1.1 chunk.
func chunk(s string) string { return strconv.FormatInt(int64(len(s)), 16) + "\r\n" + s + "\r\n" }

// metricValues scrapes /metrics and returns the value of every series whose
// name (labels included) starts with prefix.
func metricValues(t *testing.T, l *lb, prefix string) map[string]float64 {
	t.Helper()
	_, body := proxytest.Get(t, l.URL+"/metrics")
	out := map[string]float64{}
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

func metricSum(t *testing.T, l *lb, prefix string) float64 {
	t.Helper()
	var sum float64
	for _, v := range metricValues(t, l, prefix) {
		sum += v
	}
	return sum
}

// noneInFlight waits until every backend's in-flight count is back to 0,
// both in the pool and in the exposition.
func noneInFlight(t *testing.T, l *lb) {
	t.Helper()
	ok := proxytest.WaitFor(3*time.Second, func() bool {
		for _, role := range []proxy.Role{proxy.Prefill, proxy.Decode} {
			for _, b := range l.pool.Backends(role) {
				if b.InFlight() != 0 {
					return false
				}
			}
		}
		return true
	})
	if vals := metricValues(t, l, "pdlb_backend_in_flight{"); !ok || len(vals) == 0 {
		t.Fatalf("in flight not back to 0: %v", vals)
	} else {
		for k, v := range vals {
			if v != 0 {
				t.Errorf("%s = %v after every request ended", k, v)
			}
		}
	}
}

// errorJSON checks pdlb's error shape: {"error": {"message": …}}.
func errorJSON(t *testing.T, body string) string {
	t.Helper()
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Message == "" {
		t.Fatalf("not pdlb's JSON error shape: %q (%v)", body, err)
	}
	return e.Error.Message
}

func TestFaultDecodeKilledMidStream(t *testing.T) {
	p := proxytest.NewEngine(t, sseEngine([]string{`{}`}, 0, false))
	events := []string{`{"text":"a"}`, `{"text":"ab"}`, `{"text":"abc"}`}
	d := proxytest.ConnEngine(t, func(c net.Conn, _ *bufio.Reader, _ []byte) {
		c.Write([]byte(sseHead))
		for _, ev := range events {
			c.Write([]byte(chunk("data: " + ev + "\n\n")))
			time.Sleep(20 * time.Millisecond)
		}
		// Killed: the connection ends without the chunked terminator.
	})
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d}, withBreaker(1, time.Minute, 1))

	start := time.Now()
	resp, body := proxytest.Post(t, l.URL+"/generate", `{"text":"hi","stream":true}`)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("got %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if time.Since(start) > 2*time.Second {
		t.Fatalf("stream took %v to end after the decode died", time.Since(start))
	}
	parts := strings.Split(strings.TrimSuffix(body, "\n\n"), "\n\n")
	if len(parts) != len(events)+1 {
		t.Fatalf("want %d events then one error event, got %q", len(events), body)
	}
	for i, ev := range events {
		if parts[i] != "data: "+ev {
			t.Fatalf("event %d = %q, want %q", i, parts[i], "data: "+ev)
		}
	}
	last := parts[len(events)]
	if !strings.HasPrefix(last, "data: ") {
		t.Fatalf("last event %q", last)
	}
	msg := errorJSON(t, strings.TrimPrefix(last, "data: "))
	if !strings.Contains(msg, "decode "+d.URL) {
		t.Errorf("error event does not name the decode: %q", msg)
	}
	if strings.Contains(body, "[DONE]") {
		t.Error("a broken stream must not end with [DONE]")
	}
	if !proxytest.WaitFor(time.Second, func() bool { return decodeBreaker(t, l).State() == gobreaker.StateOpen }) {
		t.Errorf("decode breaker %v: the broken stream was not counted as a failure", decodeBreaker(t, l).State())
	}
	if st := l.pool.Backends(proxy.Prefill)[0].Breaker().State(); st != gobreaker.StateClosed {
		t.Errorf("prefill breaker %v: the prefill did nothing wrong", st)
	}
	noneInFlight(t, l)
	if n := metricSum(t, l, `pdlb_breaker_transitions_total{backend="decode `+d.URL+`",from="closed",to="open"}`); n != 1 {
		t.Errorf("breaker transition closed→open counted %v times, want 1", n)
	}
}

func TestFaultBackendAcceptsAndNeverAnswers(t *testing.T) {
	const firstByte = 300 * time.Millisecond
	silent := func(c net.Conn, br *bufio.Reader, _ []byte) { untilPeerCloses(c, br, 10*time.Second) }
	headersOnly := func(c net.Conn, br *bufio.Reader, _ []byte) {
		c.Write([]byte(sseHead))
		untilPeerCloses(c, br, 10*time.Second)
	}
	for _, tc := range []struct {
		name          string
		stream        bool
		hangPrefill   bool
		hang          func(net.Conn, *bufio.Reader, []byte)
		wantInMessage string
	}{
		{"decode, plain", false, false, silent, "decode"},
		{"decode, stream, no headers", true, false, silent, "decode"},
		{"decode, stream, headers but no event", true, false, headersOnly, "decode"},
		{"prefill, plain", false, true, silent, "prefill"},
		{"prefill, stream", true, true, silent, "prefill"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hung := proxytest.ConnEngine(t, tc.hang)
			var p, d *proxytest.Engine
			if tc.hangPrefill {
				// The decode waits for KV that never comes, like SGLang's.
				p, d = hung, proxytest.ConnEngine(t, silent)
			} else {
				p, d = proxytest.NewEngine(t, sseOrJSON()), hung
			}
			l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d}, withBreaker(1, time.Minute, 1), func(c *config.Config) {
				// The leg that is not under test waits longer, so that it is
				// the silent one's timeout that ends the request.
				c.Timeouts.DecodeFirstByte, c.Timeouts.PrefillFirstByte = firstByte, 5*time.Second
				if tc.hangPrefill {
					c.Timeouts.DecodeFirstByte, c.Timeouts.PrefillFirstByte = 5*time.Second, firstByte
				}
			})
			start := time.Now()
			resp, body := proxytest.Post(t, l.URL+"/generate", `{"text":"hi","stream":`+strconv.FormatBool(tc.stream)+`}`)
			el := time.Since(start)
			if resp.StatusCode != 504 {
				t.Fatalf("got %d %s", resp.StatusCode, body)
			}
			if el < firstByte || el > firstByte+time.Second {
				t.Errorf("504 after %v, want about %v", el, firstByte)
			}
			if msg := errorJSON(t, body); !strings.Contains(msg, tc.wantInMessage+" "+hung.URL) || !strings.Contains(msg, "timed out") {
				t.Errorf("message %q does not name the %s that timed out", msg, tc.wantInMessage)
			}
			if !hung.WaitClosed(time.Second) {
				t.Fatal("the silent backend's connection is still open after the 504")
			}
			if tc.hangPrefill && !d.WaitClosed(time.Second) {
				t.Fatal("the decode waiting for KV was not cut")
			}
			hb := l.pool.Find(hung.URL)
			if !proxytest.WaitFor(time.Second, func() bool { return hb.Breaker().State() == gobreaker.StateOpen }) {
				t.Errorf("breaker of the silent backend %v, want open", hb.Breaker().State())
			}
			if other := l.pool.Find(map[bool]string{true: d.URL, false: p.URL}[tc.hangPrefill]); other.Breaker().State() != gobreaker.StateClosed {
				t.Errorf("the healthy sibling's breaker is %v: a cancelled leg must not count", other.Breaker().State())
			}
			noneInFlight(t, l)
		})
	}
}

// sseOrJSON answers like a healthy prefill: SSE for streams, JSON otherwise.
func sseOrJSON() fasthttp.RequestHandler {
	stream := sseEngine([]string{`{}`}, 0, false)
	plain := proxytest.JSONAnswer(200, `{}`)
	return func(ctx *fasthttp.RequestCtx) {
		if strings.Contains(string(ctx.PostBody()), `"stream":true`) {
			stream(ctx)
			return
		}
		plain(ctx)
	}
}

func TestFaultDecodeAnswersGarbage(t *testing.T) {
	noise := make([]byte, 4096)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range noise {
		noise[i] = byte(r.Uint32())
	}
	for _, tc := range []struct{ name, raw string }{
		{"ssh banner", "SSH-2.0-OpenSSH_9.6\r\n\r\n"},
		{"binary noise", string(noise)},
		{"body without a status line", "{\"text\":\"hi\"}\r\n\r\n"},
		{"bad status code", "HTTP/1.1 2x0 OK\r\nContent-Length: 2\r\n\r\n{}"},
	} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, stream=%v", tc.name, stream), func(t *testing.T) {
				p := proxytest.NewEngine(t, sseOrJSON())
				d := proxytest.RawEngine(t, tc.raw)
				l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d}, withBreaker(1, time.Minute, 1))
				resp, body := proxytest.Post(t, l.URL+"/generate", `{"text":"hi","stream":`+strconv.FormatBool(stream)+`}`)
				if resp.StatusCode != 502 {
					t.Fatalf("got %d %s", resp.StatusCode, body)
				}
				if msg := errorJSON(t, body); !strings.Contains(msg, "decode "+d.URL) {
					t.Errorf("message %q does not name the decode", msg)
				}
				if !proxytest.WaitFor(time.Second, func() bool { return decodeBreaker(t, l).State() == gobreaker.StateOpen }) {
					t.Errorf("decode breaker %v after garbage, want open", decodeBreaker(t, l).State())
				}
				noneInFlight(t, l)
			})
		}
	}
}

func TestFaultTruncatedBodyIs502(t *testing.T) {
	for _, tc := range []struct{ name, raw string }{
		{"chunked, cut inside a chunk", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" +
			"20\r\n{\"text\":\"partial"},
		{"chunked, no terminator", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" +
			chunk(`{"text":"whole chunk"}`)},
		{"content-length, short", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"text\":\"par"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
			d := proxytest.RawEngine(t, tc.raw)
			l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d}, withBreaker(1, time.Minute, 1))
			resp, body := proxytest.Post(t, l.URL+"/generate", `{"text":"hi"}`)
			if resp.StatusCode != 502 {
				t.Fatalf("a truncated answer was relayed: %d %q", resp.StatusCode, body)
			}
			if msg := errorJSON(t, body); !strings.Contains(msg, "decode "+d.URL) {
				t.Errorf("message %q does not name the decode", msg)
			}
			if !proxytest.WaitFor(time.Second, func() bool { return decodeBreaker(t, l).State() == gobreaker.StateOpen }) {
				t.Errorf("decode breaker %v, want open", decodeBreaker(t, l).State())
			}
			noneInFlight(t, l)
		})
	}
}

// TestFaultDecodeWrongContentType pins what pdlb does today when a decode
// answers 200 text/html to a stream request: the body is relayed as if it
// were one SSE event, under text/event-stream, with no [DONE] and no error.
// (Reported: it should rather be a 502 before commit; see the report.)
func TestFaultDecodeWrongContentType(t *testing.T) {
	// A 200 that is not an event stream (a proxy's HTML error page, say) is
	// a broken decode: 502 naming it, and its breaker counts the failure.
	p := proxytest.NewEngine(t, sseOrJSON())
	d := proxytest.NewEngine(t, func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("text/html; charset=utf-8")
		ctx.SetBodyString("<html><body>502 Bad Gateway (nginx)</body></html>")
	})
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d}, withBreaker(1, time.Minute, 1))
	resp, body := proxytest.Post(t, l.URL+"/generate", `{"text":"hi","stream":true}`)
	if resp.StatusCode != 502 || !strings.Contains(body, "text/html") || !strings.Contains(body, d.URL) {
		t.Fatalf("got %d %q %q", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	if st := l.pool.Find(d.URL).Breaker().State(); st != gobreaker.StateOpen {
		t.Fatalf("decode breaker %v after a protocol error", st)
	}
	noneInFlight(t, l)
}

// slowClient sends a stream request on a raw connection (with a 4 KiB
// receive buffer when small) and returns once the response headers are in.
func slowClient(t *testing.T, l *lb, body string, small bool) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(l.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if small {
		c.(*net.TCPConn).SetReadBuffer(4096)
	}
	fmt.Fprintf(c, "POST /generate HTTP/1.1\r\nHost: pdlb\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	br := bufio.NewReaderSize(c, 1024)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading headers: %v", err)
		}
		if line == "\r\n" {
			return c, br
		}
	}
}

// floodingDecode streams 8 KiB events as fast as its writes go through, up
// to limit bytes, to requests whose body says "flood"; others get a short
// JSON answer. written is what the flood managed to write.
func floodingDecode(t *testing.T, limit int64, written *atomic.Int64) *proxytest.Engine {
	event := chunk("data: {\"text\":\"" + strings.Repeat("x", 8<<10) + "\"}\n\n")
	return proxytest.ConnEngine(t, func(c net.Conn, _ *bufio.Reader, body []byte) {
		if !strings.Contains(string(body), "flood") {
			c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\nConnection: close\r\n\r\n{\"ok\":true}"))
			return
		}
		c.Write([]byte(sseHead))
		for written.Load() < limit {
			c.SetWriteDeadline(time.Now().Add(10 * time.Second))
			n, err := c.Write([]byte(event))
			written.Add(int64(n))
			if err != nil {
				return
			}
		}
	})
}

func TestFaultStalledClientIsCutByWriteTimeout(t *testing.T) {
	const limit = 256 << 20
	var written atomic.Int64
	p := proxytest.NewEngine(t, sseOrJSON())
	d := floodingDecode(t, limit, &written)
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d}, withBreaker(1, time.Minute, 1), func(c *config.Config) {
		c.Server.WriteTimeout = 500 * time.Millisecond
		c.Timeouts.Request = time.Minute
		c.Timeouts.DecodeIdle = time.Minute
	})
	start := time.Now()
	slowClient(t, l, `{"text":"flood","stream":true}`, true) // and never read again
	if !proxytest.WaitFor(5*time.Second, func() bool { return written.Load() > 1<<20 }) {
		t.Fatal("the stream never started")
	}
	// pdlb serves others while one relay is stuck on its client.
	qs := time.Now()
	resp, body := proxytest.Post(t, l.URL+"/generate", `{"text":"quick"}`)
	if resp.StatusCode != 200 || body != `{"ok":true}` || time.Since(qs) > time.Second {
		t.Fatalf("other client: %d %q after %v", resp.StatusCode, body, time.Since(qs))
	}
	// The stuck relay gives up within write_timeout of its last write and
	// lets the decode go, without having read the engine's whole answer.
	deadline := time.Now().Add(5 * time.Second)
	for closedFlood := false; !closedFlood; {
		if !d.WaitClosed(time.Until(deadline)) {
			t.Fatalf("decode connection still open %v after the client stalled (%d bytes written)", time.Since(start), written.Load())
		}
		closedFlood = written.Load() > 1<<20
	}
	if w := written.Load(); w >= 64<<20 {
		t.Errorf("pdlb read %d MiB from the decode for a client that read nothing: unbounded buffering", w>>20)
	}
	noneInFlight(t, l)
	if st := decodeBreaker(t, l).State(); st != gobreaker.StateClosed {
		t.Errorf("decode breaker %v: a stalled client is not the decode's fault", st)
	}
	if n := metricSum(t, l, `pdlb_requests_total{route="/generate",status="499"}`); n != 1 {
		t.Errorf("stalled stream counted %v times as 499, want 1", n)
	}
}

func TestFaultSlowReaderIsBoundedByRequestTimeout(t *testing.T) {
	const limit = 256 << 20
	var written atomic.Int64
	p := proxytest.NewEngine(t, sseOrJSON())
	d := floodingDecode(t, limit, &written)
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d}, func(c *config.Config) {
		c.Server.WriteTimeout = 10 * time.Second
		c.Timeouts.Request = 1500 * time.Millisecond
	})
	start := time.Now()
	c, br := slowClient(t, l, `{"text":"flood","stream":true}`, false)
	// Read 16 KiB every 10 ms (1.6 MiB/s, far below what the decode sends):
	// pdlb's writes keep making progress within write_timeout, so only the
	// request deadline can end the stream. (Much slower readers are cut by
	// write_timeout instead: Linux wakes a blocked writer only once a third
	// of a multi-MiB send buffer has drained.) Once the decode is cut, read
	// the rest (what sits in socket buffers) at full speed.
	hurry := make(chan struct{})
	tail := make(chan string, 1)
	go func() {
		var last []byte
		buf := make([]byte, 16<<10)
		for {
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			n, err := br.Read(buf)
			last = append(last, buf[:n]...)
			if len(last) > 64<<10 {
				last = append(last[:0], last[len(last)-1024:]...)
			}
			if err != nil {
				tail <- string(last)
				return
			}
			select {
			case <-hurry:
			default:
				time.Sleep(10 * time.Millisecond)
			}
		}
	}()
	if !d.WaitClosed(5 * time.Second) {
		t.Fatalf("decode still streaming %v after a 1.5 s request deadline", time.Since(start))
	}
	if el := time.Since(start); el < time.Second {
		t.Errorf("decode cut after %v, before the request deadline", el)
	}
	close(hurry)
	select {
	case s := <-tail:
		// Either the decode read hit the deadline (a final timeout error
		// event, then the chunked terminator) or a write to the client did
		// (the connection is closed mid-body, as for a vanished client).
		if strings.HasSuffix(s, "0\r\n\r\n") && (!strings.Contains(s, `data: {"error":`) || !strings.Contains(s, "timed out")) {
			t.Errorf("stream ended cleanly without a timeout error event: ...%q", s[max(0, len(s)-300):])
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the slow client's stream never ended")
	}
	if w := written.Load(); w >= 64<<20 {
		t.Errorf("pdlb read %d MiB ahead of a 1.6 MiB/s client", w>>20)
	}
	noneInFlight(t, l)
}

// TestFaultThousandClientsWithDisconnects runs 1,000 concurrent clients
// against mock engines, one decode of which always answers 503, while a
// third of the clients hang up at a random moment. Nothing may panic or
// hang, every client that stayed gets a whole answer or a JSON error, and
// afterwards in-flight counts, breakers and request counters add up.
func TestFaultThousandClientsWithDisconnects(t *testing.T) {
	const clients = 1000
	engine := func(o mock.Options) *proxytest.Engine { e, _ := mockEngine(t, o); return e }
	fast := mock.Options{TokenDelay: 2 * time.Millisecond, OutputLen: 8}
	pf := fast
	pf.Role = mock.RolePrefill
	bad := fast
	bad.ErrorRate, bad.ErrorStatus = 1, 503
	prefills := []*proxytest.Engine{engine(pf), engine(pf)}
	good := []*proxytest.Engine{engine(fast), engine(fast)}
	broken := engine(bad)
	l := startLB(t, prefills, append(append([]*proxytest.Engine{}, good...), broken), withBreaker(5, time.Minute, 1), func(c *config.Config) {
		c.Retry = config.Retry{MaxAttempts: 3, Initial: time.Millisecond, Max: 5 * time.Millisecond}
		c.Server.WriteTimeout = 2 * time.Second
		// A thousand dials at once overflow a mock's accept backlog on a
		// small machine; the SYN retransmit (1 s, then 3 s) must not look
		// like a dead engine.
		c.Timeouts.Connect = 5 * time.Second
		// On a loaded 2-core machine (the race detector, other tests) a
		// thousand requests at once can wait seconds for an engine: a run of
		// such timeouts would open a good engine's breaker and hide what this
		// test checks (hang-ups never count). Timeouts up to the test's own
		// 15 s bound leave only that.
		c.Timeouts.PrefillFirstByte, c.Timeouts.DecodeFirstByte, c.Timeouts.DecodeIdle = 14*time.Second, 14*time.Second, 14*time.Second
		c.Timeouts.Request = 14 * time.Second
	})
	addr := strings.TrimPrefix(l.URL, "http://")

	results := make([]clientOutcome, clients)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(i), 7))
			stream := r.IntN(2) == 0
			cutAfter := time.Duration(-1)
			if r.IntN(3) == 0 {
				cutAfter = time.Duration(r.IntN(40)) * time.Millisecond
			}
			<-start
			results[i] = thousandClient(addr, stream, cutAfter)
		}()
	}
	close(start)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("clients still waiting after 15 s")
	}

	var cut, ok, errs int
	for i, o := range results {
		switch {
		case o.cut:
			cut++
		case o.err != "":
			t.Errorf("client %d (stayed connected): %s", i, o.err)
		case o.status == 200:
			ok++
		default:
			errs++
		}
	}
	t.Logf("%d answered 200, %d answered with a JSON error, %d hung up", ok, errs, cut)
	if ok < (clients-cut)*9/10 {
		t.Errorf("only %d of %d clients that stayed got a 200", ok, clients-cut)
	}

	noneInFlight(t, l)
	// Every request reached the handler (each was sent whole before any
	// hang-up) and is counted exactly once, whatever became of it.
	if !proxytest.WaitFor(3*time.Second, func() bool { return metricSum(t, l, `pdlb_requests_total{route="/generate"`) == clients }) {
		t.Errorf("pdlb_requests_total sums to %v, want %d: %v", metricSum(t, l, `pdlb_requests_total{route="/generate"`), clients,
			metricValues(t, l, "pdlb_requests_total"))
	}
	if bb := l.pool.Find(broken.URL); bb.Breaker().State() != gobreaker.StateOpen {
		t.Errorf("the always-503 decode's breaker is %v, want open", bb.Breaker().State())
	}
	if metricSum(t, l, `pdlb_retries_total{route="/generate"}`) == 0 {
		t.Error("no retry counted although one decode answers 503")
	}
	for _, b := range append(append([]*proxytest.Engine{}, prefills...), good...) {
		if st := l.pool.Find(b.URL).Breaker().State(); st != gobreaker.StateClosed {
			t.Errorf("%s breaker %v: client hang-ups must not count against engines", b.URL, st)
		}
	}
}

// clientOutcome is what one of the thousand clients saw.
type clientOutcome struct {
	cut    bool // the client hung up itself
	status int
	err    string // set when a client that stayed got no whole answer
}

// thousandClient sends one /generate on its own connection and reads the
// whole answer; with cutAfter >= 0 it closes the connection that long after
// sending. A client that stayed gets err set unless the answer is whole: a
// 200 with a JSON body or a stream ending in [DONE] or an error event, or a
// JSON error.
func thousandClient(addr string, stream bool, cutAfter time.Duration) (o clientOutcome) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		o.err = "dial: " + err.Error()
		return o
	}
	defer c.Close()
	body := `{"text":"hello pdlb","sampling_params":{"max_new_tokens":8},"stream":` + strconv.FormatBool(stream) + `}`
	if _, err := fmt.Fprintf(c, "POST /generate HTTP/1.1\r\nHost: pdlb\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body); err != nil {
		o.err = "write: " + err.Error()
		return o
	}
	if cutAfter >= 0 {
		o.cut = true
		time.AfterFunc(cutAfter, func() { c.Close() })
	}
	c.SetReadDeadline(time.Now().Add(12 * time.Second))
	var raw bytes.Buffer
	resp, err := http.ReadResponse(bufio.NewReader(io.TeeReader(c, &raw)), nil)
	if err != nil {
		if !o.cut {
			o.err = "reading the answer: " + err.Error()
		}
		return o
	}
	o.status = resp.StatusCode
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if o.cut {
		return o
	}
	if err != nil {
		o.err = fmt.Sprintf("status %d, body cut: %v", resp.StatusCode, err)
		return o
	}
	switch {
	case resp.StatusCode != 200:
		var e struct {
			Error struct{ Message string } `json:"error"`
		}
		if json.Unmarshal(b, &e) != nil || e.Error.Message == "" {
			o.err = fmt.Sprintf("status %d without a JSON error: %q", resp.StatusCode, b)
		}
	case stream:
		s := string(b)
		if !strings.HasSuffix(s, "data: [DONE]\n\n") && !strings.Contains(s, `data: {"error":`) {
			o.err = fmt.Sprintf("stream ended without [DONE] or an error event: %q (raw answer %q)", s, raw.Bytes())
		}
	default:
		if !json.Valid(b) {
			o.err = fmt.Sprintf("200 with a body that is not JSON: %q", b)
		}
	}
	return o
}

// TestFaultStreamLastEventUnterminated: an engine ends its body right
// after its last event, without the blank line. The event is relayed and
// the stream ends cleanly. (Today the relay's next read after that tail
// panics in sseReader.next and takes the process down; see the report.)
func TestFaultStreamLastEventUnterminated(t *testing.T) {
	p := proxytest.NewEngine(t, sseOrJSON())
	d := proxytest.RawEngine(t, sseHead+chunk("data: {\"text\":\"a\"}\n\n")+chunk(`data: {"text":"ab"}`)+"0\r\n\r\n")
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d})
	resp, body := proxytest.Post(t, l.URL+"/generate", `{"text":"hi","stream":true}`)
	if resp.StatusCode != 200 || body != "data: {\"text\":\"a\"}\n\ndata: {\"text\":\"ab\"}\n\n" {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	noneInFlight(t, l)
}
