package proxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"pdlb/config"
	"pdlb/proxy/proxytest"
)

// testTimeouts are leg timeouts no passing test reaches unless it shifts
// the clock on purpose; a broken cut or cancellation then fails its test
// in seconds rather than hanging it.
func testTimeouts() config.Timeouts {
	return config.Timeouts{Connect: time.Second, PrefillFirstByte: 5 * time.Second, DecodeFirstByte: 5 * time.Second,
		DecodeIdle: 5 * time.Second, Request: time.Hour}
}

// pdPair is one prefill and one decode backend, each with a real breaker
// (the default trip rule, which no test here reaches by accident), and a
// Proxy over them whose log is kept.
type pdPair struct {
	px    *Proxy
	p, d  *Backend
	log   *proxytest.SyncBuffer
	clock *testClock
}

func newPDPair(t *testing.T, prefillURL, decodeURL string) *pdPair {
	t.Helper()
	pr := &pdPair{p: mustBackend(t, prefillURL, Prefill), d: mustBackend(t, decodeURL, Decode),
		log: &proxytest.SyncBuffer{}, clock: &testClock{}}
	zl := zerolog.New(pr.log)
	pr.px = New(testTimeouts(), zl)
	pr.px.now = pr.clock.now
	for _, b := range []*Backend{pr.p, pr.d} {
		b.SetBreaker(NewBreaker(b.Role.String()+" "+b.URL, config.Default().Breaker, zl, nil))
	}
	return pr
}

// Bodies the legs of a test exchange carry (different, so an engine that
// got the other leg's body is caught).
const (
	prefillBody = `{"text":"hi","bootstrap_room":7,"leg":"prefill"}`
	decodeBody  = `{"text":"hi","bootstrap_room":7,"leg":"decode"}`
)

// exchange admits one attempt on the pair.
func (pr *pdPair) exchange(t *testing.T, stream bool) *Exchange {
	t.Helper()
	pt, pok := pr.p.Acquire()
	dt, dok := pr.d.Acquire()
	if !pok || !dok {
		t.Fatal("a fresh breaker refused admission")
	}
	return &Exchange{Prefill: pt, Decode: dt, Path: "/generate", PrefillBody: []byte(prefillBody),
		DecodeBody: []byte(decodeBody), Stream: stream, RequestID: "req-7", Deadline: time.Now().Add(time.Hour)}
}

// settled waits until both tickets are settled: neither backend counts
// the attempt in flight and each breaker has been told an outcome for
// every admission. The prefill's ticket is settled by the prefill's own
// goroutine, which may outlive Do.
func (pr *pdPair) settled(t *testing.T) {
	t.Helper()
	told := func(b *Backend) bool {
		c := counts(b)
		return b.InFlight() == 0 && c.Requests == c.TotalSuccesses+c.TotalFailures+c.TotalExclusions
	}
	if !proxytest.WaitFor(2*time.Second, func() bool { return told(pr.p) && told(pr.d) }) {
		t.Fatalf("attempt not settled: prefill in flight %d, %+v; decode in flight %d, %+v",
			pr.p.InFlight(), counts(pr.p), pr.d.InFlight(), counts(pr.d))
	}
}

// idleConns is how many connections to b wait in its pool.
func idleConns(b *Backend) int {
	b.up.mu.Lock()
	defer b.up.mu.Unlock()
	return len(b.up.idle)
}

// testClock is Proxy.now with an offset the test moves. Leg deadlines are
// set on real sockets from this clock, so moving it back by more than a
// timeout makes that deadline already past when the leg next waits: the
// timeout is reached without sleeping through it.
type testClock struct{ offset atomic.Int64 }

func (c *testClock) now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

func (c *testClock) shift(d time.Duration) { c.offset.Store(int64(d)) }

// holdingEngine reads one request per connection and then holds the
// connection without answering until pdlb closes it (an engine waiting
// for KV, or still computing). arrived gets one value per request.
func holdingEngine(t *testing.T) (*proxytest.Engine, <-chan struct{}) {
	t.Helper()
	arrived := make(chan struct{}, 16)
	e := proxytest.ConnEngine(t, func(_ net.Conn, br *bufio.Reader, _ []byte) {
		arrived <- struct{}{}
		io.Copy(io.Discard, br)
	})
	return e, arrived
}

// releaser returns a func that closes ch once; it is also called when the
// test ends. Call it after creating the engines whose handlers wait on ch:
// cleanups run last-registered first, and an engine's shutdown waits for
// its handlers.
func releaser(t *testing.T, ch chan struct{}) func() {
	f := sync.OnceFunc(func() { close(ch) })
	t.Cleanup(f)
	return f
}

// waitOn fails the test unless ch delivers within a second.
func waitOn(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(time.Second):
		t.Fatalf("%s did not happen", what)
	}
}

// An SSE answer as SGLang writes it: chunked, one chunk per write.
const (
	sseHead   = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
	lastChunk = "0\r\n\r\n"
)

func chunk(s string) string { return strconv.FormatInt(int64(len(s)), 16) + "\r\n" + s + "\r\n" }

// sseFixed is an SSE answer framed by Content-Length rather than chunked
// (a proxy in front of the engine may buffer it so).
func sseFixed(body string) string {
	return "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

// sseEngine answers every request with body as an event stream framed
// by Content-Length (as a proxy in front of an engine may send it) and
// keeps the connection open for the next one.
func sseEngine(t *testing.T, body string) *proxytest.Engine {
	t.Helper()
	return proxytest.ConnEngine(t, func(c net.Conn, br *bufio.Reader, _ []byte) {
		c.Write([]byte(sseFixed(body)))
		io.Copy(io.Discard, br)
	})
}

// clientRecorder is the client's side of a relay: it keeps every write as
// it came and counts flushes; flushed, when set, is told of each flush.
// failWrite or failFlush make the n-th call (from 1) and later ones fail,
// as on a connection the client closed.
type clientRecorder struct {
	mu        sync.Mutex
	writes    []string
	flushes   int
	flushed   chan struct{}
	failWrite int
	failFlush int
}

var errClientClosed = errors.New("write: broken pipe")

func (w *clientRecorder) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failWrite > 0 && len(w.writes)+1 >= w.failWrite {
		return 0, errClientClosed
	}
	w.writes = append(w.writes, string(p))
	return len(p), nil
}

func (w *clientRecorder) Flush() error {
	w.mu.Lock()
	w.flushes++
	n := w.flushes
	w.mu.Unlock()
	if w.failFlush > 0 && n >= w.failFlush {
		return errClientClosed
	}
	if w.flushed != nil {
		w.flushed <- struct{}{}
	}
	return nil
}

func (w *clientRecorder) got() ([]string, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.writes...), w.flushes
}

// relay runs s.Relay to w, failing the test if it does not end.
func relay(t *testing.T, s *Stream, w EventWriter) RelayResult {
	t.Helper()
	done := make(chan RelayResult, 1)
	go func() { done <- s.Relay(w, nil, 0) }()
	select {
	case res := <-done:
		return res
	case <-time.After(5 * time.Second):
		t.Fatal("the relay did not end")
		return RelayResult{}
	}
}
