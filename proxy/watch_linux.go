//go:build linux

package proxy

import (
	"net"
	"sync"
	"syscall"
	"time"
)

// watchDelay is how long a request runs before its client connection is
// watched: fast requests never pay for the watcher goroutine, slow ones
// (where a vanished client wastes engine time) are noticed within this
// much of starting.
const watchDelay = 50 * time.Millisecond

// goner is told when the client went away.
type goner interface{ clientGone() }

// clientWatch calls clientGone once if the client closes its connection
// while a request waits on the backends. fasthttp reads the whole request
// before the handler runs and only notices a vanished client when a write
// fails; a non-streaming PD request can wait minutes with nothing to write,
// so pdlb peeks at the idle client socket instead (MSG_PEEK: it consumes
// nothing). Watches are pooled with their timer.
type clientWatch struct {
	mu      sync.Mutex
	conn    net.Conn
	g       goner
	timer   *time.Timer
	stopped bool
	done    chan struct{} // set once the watcher goroutine runs
}

var watchPool sync.Pool

func watchClient(conn net.Conn, g goner) *clientWatch {
	if _, ok := conn.(syscall.Conn); !ok || conn == nil {
		return nil
	}
	w, _ := watchPool.Get().(*clientWatch)
	if w == nil {
		w = &clientWatch{}
		w.conn, w.g = conn, g
		w.timer = time.AfterFunc(watchDelay, w.start)
		return w
	}
	w.conn, w.g, w.stopped, w.done = conn, g, false, nil
	w.timer.Reset(watchDelay)
	return w
}

func (w *clientWatch) start() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	rc, err := w.conn.(syscall.Conn).SyscallConn()
	if err != nil {
		return
	}
	done := make(chan struct{})
	w.done = done
	go w.run(rc, done)
}

func (w *clientWatch) run(rc syscall.RawConn, done chan struct{}) {
	defer close(done)
	var b [1]byte
	closed := false
	rerr := rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case err == syscall.EAGAIN || err == syscall.EINTR:
			return false
		case err != nil, n == 0:
			closed = true
		}
		// n > 0: the client sent more (a pipelined request); stop watching.
		return true
	})
	if rerr == nil && closed {
		w.g.clientGone()
	}
}

// stop ends the watch; once it returns the connection is fasthttp's again.
func (w *clientWatch) stop() {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.stopped = true
	notFired := w.timer.Stop()
	done := w.done
	w.mu.Unlock()
	if done != nil {
		// Wake the poller and wait, so the deadline is restored before
		// fasthttp uses the connection again.
		w.conn.SetReadDeadline(aLongTimeAgoDeadline)
		<-done
		w.conn.SetReadDeadline(time.Time{})
	}
	// A timer that fired may still be about to call start; such a watch is
	// left to the garbage collector rather than reused.
	if notFired || done != nil {
		w.conn, w.g = nil, nil
		watchPool.Put(w)
	}
}
