//go:build linux

package proxy

import (
	"net"
	"syscall"
	"time"
)

// watchClient calls gone once if the client closes its connection before
// stop is called. fasthttp reads the whole request before the handler runs
// and only notices a vanished client when a write fails; a non-streaming
// PD request can wait minutes with nothing to write, so pdlb peeks at the
// idle client socket instead (MSG_PEEK: it consumes nothing).
func watchClient(conn net.Conn, gone func()) (stop func()) {
	sc, ok := conn.(syscall.Conn)
	if !ok || conn == nil {
		return func() {}
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var b [1]byte
		closed := false
		rerr := rc.Read(func(fd uintptr) bool {
			n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			switch {
			case err == syscall.EAGAIN || err == syscall.EINTR:
				return false
			case err != nil:
				closed = true
			case n == 0:
				closed = true
			}
			// n > 0: the client sent more (a pipelined request); stop watching.
			return true
		})
		if rerr == nil && closed {
			gone()
		}
	}()
	return func() {
		// Wake the poller and wait, so the deadline is restored before
		// fasthttp uses the connection again.
		conn.SetReadDeadline(aLongTimeAgoDeadline)
		<-done
		conn.SetReadDeadline(time.Time{})
	}
}
