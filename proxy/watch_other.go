//go:build !linux

package proxy

import "net"

type goner interface{ clientGone() }

// clientWatch is a no-op where MSG_PEEK polling is not wired up; client
// disconnects are then noticed at the next write or by the timeouts.
type clientWatch struct{}

func watchClient(conn net.Conn, g goner) *clientWatch { return nil }

func (w *clientWatch) stop() {}

// WatchClient is a no-op here; see watch_linux.go.
func WatchClient(conn net.Conn, gone func()) (stop func()) { return func() {} }
