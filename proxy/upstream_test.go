package proxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"pdlb/proxy/proxytest"
)

// acceptor is a loopback listener that keeps the server side of every
// connection dialled to it, so a test can see which ones pdlb closed.
type acceptor struct {
	addr  string
	mu    sync.Mutex
	conns map[string]net.Conn // by the dialler's local address
	n     int
}

func newAcceptor(t *testing.T) *acceptor {
	t.Helper()
	ln := proxytest.Listen(t, "127.0.0.1:0")
	a := &acceptor{addr: ln.Addr().String(), conns: map[string]net.Conn{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			a.mu.Lock()
			a.conns[c.RemoteAddr().String()] = c
			a.n++
			a.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		a.mu.Lock()
		defer a.mu.Unlock()
		for _, c := range a.conns {
			c.Close()
		}
	})
	return a
}

// accepted is how many connections were dialled to the acceptor.
func (a *acceptor) accepted() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n
}

// closedByPeer reports whether pdlb closed its end of c: the server side
// reads EOF.
func (a *acceptor) closedByPeer(t *testing.T, c *upConn) bool {
	t.Helper()
	var s net.Conn
	proxytest.WaitFor(time.Second, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		s = a.conns[c.LocalAddr().String()]
		return s != nil
	})
	if s == nil {
		t.Fatal("the acceptor never saw the connection")
	}
	s.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := s.Read(make([]byte, 1))
	return errors.Is(err, io.EOF)
}

func TestUpstreamReusesAPooledConnection(t *testing.T) {
	a := newAcceptor(t)
	u := newUpstream(a.addr, time.Second)
	t.Cleanup(u.closeIdle)
	c1, reused, err := u.get(time.Time{})
	if err != nil || reused {
		t.Fatalf("first get: reused=%v err=%v", reused, err)
	}
	u.put(c1)
	c2, reused, err := u.get(time.Time{})
	if err != nil || !reused || c2 != c1 {
		t.Fatalf("second get: reused=%v same=%v err=%v, want the pooled connection", reused, c2 == c1, err)
	}
	u.put(c2)
	proxytest.WaitFor(time.Second, func() bool { return a.accepted() > 0 }) // Accept may trail the dial
	if n := a.accepted(); n != 1 {
		t.Fatalf("%d connections dialled, want 1", n)
	}
}

// TestUpstreamDropsConnectionsPastMaxIdleAge: a connection idle for
// maxIdleAge (by the upstream's clock) is closed, not reused: the engine
// has likely closed it already (uvicorn's keep-alive is 5 s).
func TestUpstreamDropsConnectionsPastMaxIdleAge(t *testing.T) {
	for _, tc := range []struct {
		name   string
		idle   time.Duration
		reused bool
	}{
		{"fresh", 0, true},
		{"just under maxIdleAge", 4*time.Second - time.Nanosecond, true},
		{"at maxIdleAge", 4 * time.Second, false},
		{"long idle", time.Hour, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAcceptor(t)
			u := newUpstream(a.addr, time.Second)
			t.Cleanup(u.closeIdle)
			if u.maxIdleAge != 4*time.Second {
				t.Fatalf("maxIdleAge %v; the table assumes 4s", u.maxIdleAge)
			}
			now := time.Unix(1000, 0)
			u.now = func() time.Time { return now }
			c1, _, err := u.get(time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			u.put(c1)
			now = now.Add(tc.idle)
			c2, reused, err := u.get(time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			defer c2.Close()
			if reused != tc.reused || (c2 == c1) != tc.reused {
				t.Fatalf("after %v idle: reused=%v same=%v, want %v", tc.idle, reused, c2 == c1, tc.reused)
			}
			if !tc.reused && !a.closedByPeer(t, c1) {
				t.Fatal("the stale connection was dropped but not closed")
			}
		})
	}
}

func TestUpstreamCloseIdleClosesEveryPooledConnection(t *testing.T) {
	a := newAcceptor(t)
	u := newUpstream(a.addr, time.Second)
	var cs []*upConn
	for range 3 {
		c, err := u.dial(time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	for _, c := range cs {
		u.put(c)
	}
	u.closeIdle()
	for i, c := range cs {
		if !a.closedByPeer(t, c) {
			t.Errorf("pooled connection %d still open after closeIdle", i)
		}
	}
	c, reused, err := u.get(time.Time{})
	if err != nil || reused {
		t.Fatalf("get after closeIdle: reused=%v err=%v, want a fresh dial", reused, err)
	}
	c.Close()
}

// TestUpstreamClosesConnectionsBeyondMaxIdle: the pool keeps at most
// maxIdle connections; one more is closed, not leaked.
func TestUpstreamClosesConnectionsBeyondMaxIdle(t *testing.T) {
	a := newAcceptor(t)
	u := newUpstream(a.addr, time.Second)
	t.Cleanup(u.closeIdle)
	u.maxIdle = 1
	c1, _ := u.dial(time.Time{})
	c2, _ := u.dial(time.Time{})
	if c1 == nil || c2 == nil {
		t.Fatal("dial failed")
	}
	u.put(c1)
	u.put(c2)
	if !a.closedByPeer(t, c2) {
		t.Fatal("a connection beyond maxIdle was kept open")
	}
	if a.closedByPeer(t, c1) {
		t.Fatal("the pooled connection was closed")
	}
}

// TestUpstreamReadsLargeResponseHeads: a head larger than the
// connection's 2 KiB buffer (a proxy in front of the engine adding
// headers) is read; one past the 64 KiB limit fails as a broken answer
// rather than hanging.
func TestUpstreamReadsLargeResponseHeads(t *testing.T) {
	for _, tc := range []struct {
		name string
		size int
		ok   bool
	}{
		{"small", 100, true},
		{"over the 2 KiB buffer", 5 << 10, true},
		{"near the 64 KiB limit", 60 << 10, true},
		{"over the 64 KiB limit", 70 << 10, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			big := strings.Repeat("a", tc.size)
			e := proxytest.ConnEngine(t, func(c net.Conn, _ *bufio.Reader, _ []byte) {
				c.Write([]byte("HTTP/1.1 200 OK\r\nX-Big: " + big + "\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"))
			})
			b := mustBackend(t, e.URL, Decode)
			l := &leg{b: b}
			defer l.reset()
			uerr := l.start("/generate", []byte(`{}`), "", nil, time.Now().Add(5*time.Second))
			if !tc.ok {
				if uerr == nil || uerr.Kind != KindProtocol {
					t.Fatalf("head of %d bytes: %v, want a protocol error", tc.size, uerr)
				}
				return
			}
			if uerr != nil {
				t.Fatalf("head of %d bytes: %v", tc.size, uerr)
			}
			if got := string(l.resp.Header.Peek("X-Big")); got != big {
				t.Fatalf("X-Big has %d bytes, want %d", len(got), len(big))
			}
			if uerr := l.readBody(time.Time{}); uerr != nil || string(l.resp.Body()) != "{}" {
				t.Fatalf("body %q, err %v", l.resp.Body(), uerr)
			}
		})
	}
}
