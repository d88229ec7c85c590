//go:build !linux

package proxy

import "net"

// clientWatch is a no-op where MSG_PEEK polling is not wired up; client
// disconnects are then noticed at the next write or by the timeouts.
type clientWatch struct{}

func watchClient(conn net.Conn, gone func()) *clientWatch { return nil }

func (w *clientWatch) stop() {}
