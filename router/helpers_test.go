package router

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"pdlb/config"
	"pdlb/proxy"
)

// backend is a real loopback engine written for the tests: it records what
// it received and counts closed connections.
type backend struct {
	t      *testing.T
	ln     net.Listener
	srv    *fasthttp.Server
	URL    string
	mu     sync.Mutex
	bodies [][]byte
	paths  []string
	ids    []string      // X-Request-ID of each request
	closed chan struct{} // one value per closed connection
}

func newBackend(t *testing.T, h fasthttp.RequestHandler) *backend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{t: t, ln: ln, URL: "http://" + ln.Addr().String(), closed: make(chan struct{}, 1024)}
	b.srv = &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			b.mu.Lock()
			b.bodies = append(b.bodies, append([]byte(nil), ctx.PostBody()...))
			b.paths = append(b.paths, string(ctx.Path()))
			b.ids = append(b.ids, string(ctx.Request.Header.Peek("X-Request-ID")))
			b.mu.Unlock()
			h(ctx)
		},
		ConnState: func(_ net.Conn, s fasthttp.ConnState) {
			if s == fasthttp.StateClosed {
				b.closed <- struct{}{}
			}
		},
		CloseOnShutdown: true,
		Logger:          quietLogger{},
	}
	go b.srv.Serve(ln)
	t.Cleanup(func() { b.srv.Shutdown() })
	return b
}

func (b *backend) lastBody() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.bodies) == 0 {
		return nil
	}
	return b.bodies[len(b.bodies)-1]
}

func (b *backend) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.bodies)
}

// waitClosed waits for one connection close seen by the backend.
func (b *backend) waitClosed(d time.Duration) bool {
	select {
	case <-b.closed:
		return true
	case <-time.After(d):
		return false
	}
}

// lb is a pdlb router on a real loopback listener.
type lb struct {
	URL    string
	router *Router
	pool   *proxy.Pool
	svc    *Service
}

type lbOption func(*config.Config)

func testConfig() config.Config {
	c := config.Config{}
	c.Server = config.Server{Host: "127.0.0.1", Port: 0, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, IdleTimeout: 10 * time.Second, MaxHeaderBytes: 8192}
	c.Timeouts = config.Timeouts{Connect: time.Second, PrefillFirstByte: 5 * time.Second, DecodeFirstByte: 5 * time.Second, DecodeIdle: 5 * time.Second, Request: 10 * time.Second}
	c.Limits = config.Limits{MaxBodyBytes: 1 << 20}
	c.Retry = config.Retry{MaxAttempts: 1, Initial: time.Millisecond, Max: 10 * time.Millisecond}
	c.Bootstrap.Mode = "off"
	c.Metrics.Enabled = true
	return c
}

func startLB(t *testing.T, prefills []*backend, decodes []*backend, opts ...lbOption) *lb {
	t.Helper()
	log := zerolog.New(io.Discard)
	if testing.Verbose() {
		log = zerolog.New(zerolog.NewTestWriter(t))
	}
	return startLBWithLog(t, prefills, decodes, log, opts...)
}

func startLBWithLog(t *testing.T, prefills []*backend, decodes []*backend, log zerolog.Logger, opts ...lbOption) *lb {
	t.Helper()
	cfg := testConfig()
	port := 8998
	for _, p := range prefills {
		cfg.Prefill = append(cfg.Prefill, config.Prefill{URL: p.URL, BootstrapPort: &port})
	}
	for _, d := range decodes {
		cfg.Decode = append(cfg.Decode, config.Decode{URL: d.URL})
	}
	for _, o := range opts {
		o(&cfg)
	}
	svc, err := NewService(&cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Shutdown(context.Background()) })
	return &lb{URL: "http://" + svc.Addr(), router: svc.Router, pool: svc.Pool, svc: svc}
}

// jsonAnswer is a handler answering a fixed JSON body.
func jsonAnswer(status int, body string) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		ctx.SetStatusCode(status)
		ctx.SetContentType("application/json")
		ctx.SetBodyString(body)
	}
}

func post(t *testing.T, url, body string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	return readAll(t, resp, err)
}

// readAll reads and closes a client response.
func readAll(t *testing.T, resp *http.Response, err error) (*http.Response, string) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// rawRequest writes raw bytes on a fresh connection to pdlb and reads the
// answer: for requests no well-behaved client would send.
func rawRequest(t *testing.T, l *lb, raw string) (*http.Response, string) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(l.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Write([]byte(raw))
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	return readAll(t, resp, err)
}

type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}

// rawBackend answers every request on a connection with raw bytes and then
// closes the connection: for answers no well-behaved server would send.
func rawBackend(t *testing.T, raw string) *backend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{t: t, ln: ln, URL: "http://" + ln.Addr().String(), closed: make(chan struct{}, 1024)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				body, _ := io.ReadAll(req.Body)
				b.mu.Lock()
				b.bodies = append(b.bodies, body)
				b.paths = append(b.paths, req.URL.Path)
				b.mu.Unlock()
				c.Write([]byte(raw))
			}()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return b
}

func (b *backend) lastPath() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.paths) == 0 {
		return ""
	}
	return b.paths[len(b.paths)-1]
}

// waitFor polls cond until it holds or d passes.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
	return true
}

func get(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Get(url)
	return readAll(t, resp, err)
}

func (b *backend) allBodies() [][]byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([][]byte(nil), b.bodies...)
}

// syncBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte(nil), s.b.Bytes()...)
}

func (b *backend) lastID() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.ids) == 0 {
		return ""
	}
	return b.ids[len(b.ids)-1]
}
