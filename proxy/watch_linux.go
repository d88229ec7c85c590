//go:build linux

package proxy

import (
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// watchDelay is how long a request runs before its client connection is
// watched: fast requests never pay for the watch, slow ones (where a
// vanished client wastes engine time) are noticed within this much of
// starting.
const watchDelay = 50 * time.Millisecond

// goner is told when the client went away.
type goner interface{ clientGone() }

// clientWatch calls clientGone once if the client closes its connection
// while a request waits on the backends. fasthttp reads the whole request
// before the handler runs and only notices a vanished client when a write
// fails; a PD request can wait minutes with nothing to write, so pdlb
// watches the idle client socket instead.
//
// All watched sockets share one epoll instance and one goroutine (the
// hub): a burst of 5,000 streams waiting for their first token holds no
// goroutine per watch. Readiness is confirmed with MSG_PEEK, which
// consumes nothing. Watches are pooled with their timer.
type clientWatch struct {
	mu         sync.Mutex
	conn       net.Conn
	g          goner
	timer      *time.Timer
	stopped    bool
	registered bool
	fd         int
	// gen tells this use of a pooled watch from earlier ones: an epoll
	// event carries it, and a stale event is ignored.
	gen int32
}

var (
	watchPool sync.Pool
	watchGen  atomic.Int32
)

func watchClient(conn net.Conn, g goner) *clientWatch {
	return watchClientAfter(conn, g, watchDelay)
}

// WatchClient calls gone once if the client closes conn before stop is
// called, watching from now on (the retry backoff waits with it).
func WatchClient(conn net.Conn, gone func()) (stop func()) {
	w := watchClientAfter(conn, goneFunc(gone), 0)
	return w.stop
}

// goneFunc adapts a func to goner.
type goneFunc func()

func (f goneFunc) clientGone() { f() }

func watchClientAfter(conn net.Conn, g goner, delay time.Duration) *clientWatch {
	if conn == nil {
		return nil
	}
	if _, ok := conn.(syscall.Conn); !ok {
		return nil
	}
	w, _ := watchPool.Get().(*clientWatch)
	if w == nil {
		w = &clientWatch{}
		w.conn, w.g, w.gen = conn, g, watchGen.Add(1)
		w.timer = time.AfterFunc(delay, w.start)
		return w
	}
	// Under the lock: the hub may still hold this watch from an earlier
	// use and is about to check it.
	w.mu.Lock()
	w.conn, w.g, w.stopped, w.registered, w.gen = conn, g, false, false, watchGen.Add(1)
	w.mu.Unlock()
	w.timer.Reset(delay)
	return w
}

// start registers the socket with the hub (the timer's callback).
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
	fd := -1
	if rc.Control(func(f uintptr) { fd = int(f) }) != nil || fd < 0 {
		return
	}
	w.fd = fd
	w.registered = hub().add(w)
}

// stop ends the watch; once it returns the connection is the caller's
// again and clientGone will not be called.
func (w *clientWatch) stop() {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.stopped = true
	notFired := w.timer.Stop()
	registered := w.registered
	w.registered = false
	w.mu.Unlock()
	if registered {
		hub().remove(w)
	}
	// A timer that fired may still be about to call start; such a watch is
	// left to the garbage collector rather than reused.
	if notFired || registered {
		w.mu.Lock()
		w.conn, w.g = nil, nil
		w.mu.Unlock()
		watchPool.Put(w)
	}
}

// watchHub waits on every watched socket with one epoll instance.
type watchHub struct {
	epfd int
	mu   sync.Mutex
	byFD map[int32]*clientWatch
}

var (
	theHub     *watchHub
	theHubOnce sync.Once
)

// hub returns the process's watch hub (nil when epoll is unavailable:
// disconnects are then noticed at the next write or by the timeouts).
func hub() *watchHub {
	theHubOnce.Do(func() {
		epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
		if err != nil {
			return
		}
		theHub = &watchHub{epfd: epfd, byFD: make(map[int32]*clientWatch)}
		go theHub.loop()
	})
	return theHub
}

// Readable (a pipelined request), peer closed, or an error. One-shot: a
// spurious wake-up re-arms it.
const watchEvents = syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLERR | syscall.EPOLLHUP | syscall.EPOLLONESHOT

func (h *watchHub) add(w *clientWatch) bool {
	if h == nil {
		return false
	}
	h.mu.Lock()
	h.byFD[int32(w.fd)] = w
	h.mu.Unlock()
	ev := syscall.EpollEvent{Events: watchEvents, Fd: int32(w.fd), Pad: w.gen}
	if syscall.EpollCtl(h.epfd, syscall.EPOLL_CTL_ADD, w.fd, &ev) != nil {
		h.mu.Lock()
		delete(h.byFD, int32(w.fd))
		h.mu.Unlock()
		return false
	}
	return true
}

func (h *watchHub) remove(w *clientWatch) {
	h.mu.Lock()
	if h.byFD[int32(w.fd)] == w {
		delete(h.byFD, int32(w.fd))
	}
	h.mu.Unlock()
	syscall.EpollCtl(h.epfd, syscall.EPOLL_CTL_DEL, w.fd, nil)
}

func (h *watchHub) loop() {
	events := make([]syscall.EpollEvent, 128)
	for {
		n, err := syscall.EpollWait(h.epfd, events, -1)
		if err != nil {
			if err == syscall.EINTR {
				continue
			}
			return
		}
		for _, ev := range events[:n] {
			h.handle(ev.Fd, ev.Pad)
		}
	}
}

// handle checks one woken socket. The watch's own lock is held while
// clientGone runs, and stop takes it first: once stop has returned, a late
// event finds the watch stopped (or its generation changed) and does
// nothing, so a pooled attempt is never cancelled on behalf of an earlier
// request.
func (h *watchHub) handle(fd, gen int32) {
	h.mu.Lock()
	w := h.byFD[fd]
	h.mu.Unlock()
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped || w.gen != gen || !w.registered {
		return
	}
	var b [1]byte
	n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	switch {
	case err == syscall.EAGAIN || err == syscall.EINTR:
		ev := syscall.EpollEvent{Events: watchEvents, Fd: fd, Pad: gen}
		syscall.EpollCtl(h.epfd, syscall.EPOLL_CTL_MOD, int(fd), &ev)
	case err != nil, n == 0:
		w.g.clientGone()
	}
	// n > 0: the client sent more (a pipelined request); stop watching.
}
