//go:build linux

package proxy

import (
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

type countingGoner struct{ n atomic.Int32 }

func (g *countingGoner) clientGone() { g.n.Add(1) }

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (server, client net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close(); client.Close() })
	return server, client
}

func waitRegistered(t *testing.T, w *clientWatch) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		w.mu.Lock()
		ok := w.registered
		w.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("watch never registered")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestWatchReportsAClosedClient(t *testing.T) {
	server, client := tcpPair(t)
	g := &countingGoner{}
	w := watchClient(server, g)
	waitRegistered(t, w)
	client.Close()
	deadline := time.Now().Add(time.Second)
	for g.n.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	w.stop()
	if got := g.n.Load(); got != 1 {
		t.Fatalf("clientGone called %d times, want 1", got)
	}
}

func TestWatchIgnoresAPipelinedRequest(t *testing.T) {
	server, client := tcpPair(t)
	g := &countingGoner{}
	w := watchClient(server, g)
	waitRegistered(t, w)
	client.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
	time.Sleep(100 * time.Millisecond)
	w.stop()
	if got := g.n.Load(); got != 0 {
		t.Fatalf("clientGone called %d times for a client that sent more", got)
	}
	// The peeked bytes are still there for the server to read.
	server.SetReadDeadline(time.Now().Add(time.Second))
	b := make([]byte, 3)
	if n, err := server.Read(b); err != nil || string(b[:n]) != "GET" {
		t.Fatalf("server read %q, %v", b[:n], err)
	}
}

// TestWatchStoppedIgnoresALateEvent: an event that the hub collected before
// stop returned must not reach the goner afterwards (the attempt behind it
// is pooled and may already serve another request).
func TestWatchStoppedIgnoresALateEvent(t *testing.T) {
	server, client := tcpPair(t)
	g := &countingGoner{}
	w := watchClient(server, g)
	waitRegistered(t, w)
	fd, gen := int32(w.fd), w.gen
	w.stop()
	client.Close()
	hub().handle(fd, gen)
	if g.n.Load() != 0 {
		t.Fatal("a late event reached a stopped watch's goner")
	}

	// A reused watch (a new generation) ignores an event of an earlier use.
	// The socket is taken off epoll first so that only the calls below
	// can act on it.
	server2, client2 := tcpPair(t)
	g2 := &countingGoner{}
	w2 := watchClient(server2, g2)
	waitRegistered(t, w2)
	syscall.EpollCtl(hub().epfd, syscall.EPOLL_CTL_DEL, w2.fd, nil)
	client2.Close()
	time.Sleep(20 * time.Millisecond)
	hub().handle(int32(w2.fd), gen)
	if g2.n.Load() != 0 {
		t.Fatal("an event of an earlier generation reached the goner")
	}
	hub().handle(int32(w2.fd), w2.gen)
	if g2.n.Load() != 1 {
		t.Fatal("the watch's own event did not reach the goner")
	}
	w2.stop()
}

func TestWatchStopBeforeTheDelayNeverRegisters(t *testing.T) {
	server, client := tcpPair(t)
	g := &countingGoner{}
	w := watchClient(server, g)
	w.stop()
	client.Close()
	time.Sleep(2 * watchDelay)
	if g.n.Load() != 0 {
		t.Fatal("a watch stopped before its delay reported the client")
	}
}

// TestWatchReuseWhileTheHubChecksIt: the hub may hold a watch from an
// earlier use while the watch is stopped and handed out again; under -race
// this catches fields set outside the watch's lock.
func TestWatchReuseWhileTheHubChecksIt(t *testing.T) {
	server, _ := tcpPair(t)
	g := &countingGoner{}
	for i := 0; i < 200; i++ {
		w := watchClient(server, g)
		w.timer.Stop()
		w.start() // register now rather than after the delay
		fd, gen := int32(w.fd), w.gen
		done := make(chan struct{})
		go func() {
			hub().handle(fd, gen)
			close(done)
		}()
		w.stop()
		watchClient(server, g).stop() // likely the same watch, reused
		<-done
	}
	if g.n.Load() != 0 {
		t.Fatalf("clientGone called %d times for an open client", g.n.Load())
	}
}
