package proxytest

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// Engine is a real loopback engine for tests: it answers with a handler
// and records what it received and how many connections closed.
type Engine struct {
	URL    string
	ln     net.Listener
	srv    *fasthttp.Server
	mu     sync.Mutex
	bodies [][]byte
	paths  []string
	ids    []string      // X-Request-ID of each request
	tps    []string      // traceparent of each request
	closed chan struct{} // one value per closed connection
}

// NewEngine serves h on a fresh loopback port until the test ends.
func NewEngine(t testing.TB, h fasthttp.RequestHandler) *Engine {
	t.Helper()
	return NewEngineOn(t, Listen(t, "127.0.0.1:0"), h)
}

// NewEngineOn serves h on ln until the test ends.
func NewEngineOn(t testing.TB, ln net.Listener, h fasthttp.RequestHandler) *Engine {
	t.Helper()
	e := &Engine{ln: ln, URL: "http://" + ln.Addr().String(), closed: make(chan struct{}, 1024)}
	e.srv = &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			e.record(append([]byte(nil), ctx.PostBody()...), string(ctx.Path()), string(ctx.Request.Header.Peek("X-Request-ID")),
				string(ctx.Request.Header.Peek("traceparent")))
			h(ctx)
		},
		ConnState: func(_ net.Conn, s fasthttp.ConnState) {
			if s == fasthttp.StateClosed {
				e.closed <- struct{}{}
			}
		},
		CloseOnShutdown: true,
		Logger:          QuietLogger{},
	}
	go e.srv.Serve(ln)
	t.Cleanup(func() { e.srv.Shutdown() })
	return e
}

// NewTLSEngine serves h over TLS (cfg: ServerConfig) on a fresh loopback
// port until the test ends; its URL is https://.
func NewTLSEngine(t testing.TB, cfg *tls.Config, h fasthttp.RequestHandler) *Engine {
	t.Helper()
	e := NewEngineOn(t, tls.NewListener(Listen(t, "127.0.0.1:0"), cfg), h)
	e.URL = "https://" + e.ln.Addr().String()
	return e
}

// Close stops the engine at once, as if it was killed: its listener and
// every connection close (pdlb's next health check fails).
func (e *Engine) Close() {
	if e.srv != nil {
		e.srv.Shutdown()
	}
}

// RawEngine answers every request on a connection with raw bytes and then
// closes the connection: for answers no well-behaved server would send.
func RawEngine(t testing.TB, raw string) *Engine {
	t.Helper()
	return ConnEngine(t, func(c net.Conn, _ *bufio.Reader, _ []byte) { c.Write([]byte(raw)) })
}

// ConnEngine reads one HTTP request per connection and hands the raw
// connection to handle, for answers no HTTP server library would write.
// The connection is closed (and counted, WaitClosed) once handle returns;
// every connection still open is closed when the test ends.
func ConnEngine(t testing.TB, handle func(c net.Conn, br *bufio.Reader, body []byte)) *Engine {
	t.Helper()
	ln := Listen(t, "127.0.0.1:0")
	e := &Engine{ln: ln, URL: "http://" + ln.Addr().String(), closed: make(chan struct{}, 1024)}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns = map[net.Conn]bool{}
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() {
					c.Close()
					mu.Lock()
					delete(conns, c)
					mu.Unlock()
					e.closed <- struct{}{}
				}()
				br := bufio.NewReader(c)
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				body, _ := io.ReadAll(req.Body)
				e.record(body, req.URL.Path, req.Header.Get("X-Request-ID"), req.Header.Get("traceparent"))
				handle(c, br, body)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return e
}

// Listen opens a TCP listener on addr, failing the test if it cannot.
func Listen(t testing.TB, addr string) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func (e *Engine) record(body []byte, path, id, traceparent string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.bodies = append(e.bodies, body)
	e.paths = append(e.paths, path)
	e.ids = append(e.ids, id)
	e.tps = append(e.tps, traceparent)
}

// Traceparents returns the W3C traceparent header of every request
// received, oldest first ("" where there was none).
func (e *Engine) Traceparents() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.tps...)
}

// LastBodyTo is the body of the last request received on path (nil
// before any): health checks reach engines too.
func (e *Engine) LastBodyTo(path string) []byte {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := len(e.paths) - 1; i >= 0; i-- {
		if e.paths[i] == path {
			return e.bodies[i]
		}
	}
	return nil
}

// LastBody is the body of the last request received (nil before any).
func (e *Engine) LastBody() []byte {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.bodies) == 0 {
		return nil
	}
	return e.bodies[len(e.bodies)-1]
}

// LastPath is the path of the last request received.
func (e *Engine) LastPath() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.paths) == 0 {
		return ""
	}
	return e.paths[len(e.paths)-1]
}

// LastID is the X-Request-ID of the last request received.
func (e *Engine) LastID() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.ids) == 0 {
		return ""
	}
	return e.ids[len(e.ids)-1]
}

// Count is the number of requests received.
func (e *Engine) Count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.bodies)
}

// Bodies returns every body received, oldest first.
func (e *Engine) Bodies() [][]byte {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([][]byte(nil), e.bodies...)
}

// WaitClosed waits up to d for one connection close seen by the engine.
func (e *Engine) WaitClosed(d time.Duration) bool {
	select {
	case <-e.closed:
		return true
	case <-time.After(d):
		return false
	}
}

// JSONAnswer is a handler answering a fixed JSON body.
func JSONAnswer(status int, body string) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		ctx.SetStatusCode(status)
		ctx.SetContentType("application/json")
		ctx.SetBodyString(body)
	}
}

// QuietLogger silences fasthttp's own log lines in tests.
type QuietLogger struct{}

// Printf implements fasthttp.Logger.
func (QuietLogger) Printf(string, ...any) {}

// ListenIPv6 opens a listener on the IPv6 loopback; the test is skipped
// where the machine has none.
func ListenIPv6(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	return ln
}
