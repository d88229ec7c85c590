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

// clientWatch calls gone once if the client closes its connection while a
// request waits on the backends. fasthttp reads the whole request before
// the handler runs and only notices a vanished client when a write fails; a
// non-streaming PD request can wait minutes with nothing to write, so pdlb
// peeks at the idle client socket instead (MSG_PEEK: it consumes nothing).
type clientWatch struct {
	mu      sync.Mutex
	conn    net.Conn
	rc      syscall.RawConn
	gone    func()
	timer   *time.Timer
	stopped bool
	done    chan struct{} // set once the watcher goroutine runs
}

func watchClient(conn net.Conn, gone func()) *clientWatch {
	sc, ok := conn.(syscall.Conn)
	if !ok || conn == nil {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	w := &clientWatch{conn: conn, rc: rc, gone: gone}
	w.timer = time.AfterFunc(watchDelay, w.start)
	return w
}

func (w *clientWatch) start() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	w.done = make(chan struct{})
	go w.run()
}

func (w *clientWatch) run() {
	defer close(w.done)
	var b [1]byte
	closed := false
	rerr := w.rc.Read(func(fd uintptr) bool {
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
		w.gone()
	}
}

// stop ends the watch; once it returns the connection is fasthttp's again.
func (w *clientWatch) stop() {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.stopped = true
	w.timer.Stop()
	done := w.done
	w.mu.Unlock()
	if done == nil {
		return
	}
	// Wake the poller and wait, so the deadline is restored before fasthttp
	// uses the connection again.
	w.conn.SetReadDeadline(aLongTimeAgoDeadline)
	<-done
	w.conn.SetReadDeadline(time.Time{})
}
