package mock

import (
	"errors"
	"net"
	"os"
	"time"
)

// fault is what injection decided for one request.
type fault uint8

const (
	faultNone  fault = iota
	faultError       // answer Options.ErrorStatus
	faultStall       // accept and never answer
	faultDie         // close the connection mid-answer
)

// hasFaults reports whether any fault can be injected.
func (o *Options) hasFaults() bool {
	return o.ErrorRate > 0 || o.StallProb > 0 || o.DieMidStreamProb > 0 || o.DieAfterEvents > 0 || o.StallAfterEvents > 0
}

// dieAfter returns after how many events this stream dies
// (Options.DieAfterEvents) or stalls (StallAfterEvents), or -1.
func (e *Engine) dieAfter() (int, bool) {
	k, stall := e.opts.DieAfterEvents, false
	if k <= 0 {
		k, stall = e.opts.StallAfterEvents, true
	}
	if k <= 0 {
		return -1, false
	}
	if e.opts.DieStreams > 0 && e.dyingStreams.Add(1) > int64(e.opts.DieStreams) {
		return -1, false
	}
	return k, stall
}

// drawFault decides a request's fault, drawing in a fixed order so that a
// seeded engine repeats itself given the same request sequence.
func (e *Engine) drawFault() fault {
	if !e.opts.hasFaults() {
		return faultNone
	}
	switch {
	case e.chance(e.opts.ErrorRate):
		return faultError
	case e.chance(e.opts.StallProb):
		return faultStall
	case e.chance(e.opts.DieMidStreamProb):
		return faultDie
	}
	return faultNone
}

// chance is true with probability p; it draws only for 0 < p < 1.
func (e *Engine) chance(p float64) bool {
	switch {
	case p <= 0:
		return false
	case p >= 1:
		return true
	}
	e.rngMu.Lock()
	v := e.rng.Float64()
	e.rngMu.Unlock()
	return v < p
}

// maxHold bounds stalls and kept-open streams, so that a forgotten client
// cannot pin the engine forever.
const (
	maxStall    = 10 * time.Minute
	maxKeepOpen = time.Minute
)

// waitClientGone blocks until the client closes conn (or sends anything),
// stop or abort closes, or limit passes. fasthttp has read the whole request
// before the handler runs and reads nothing more until the answer is out,
// so peeking at the connection is the only way to see a client leave.
func waitClientGone(conn net.Conn, stop, abort <-chan struct{}, limit time.Duration) {
	if conn == nil {
		return
	}
	defer conn.SetReadDeadline(time.Time{})
	deadline := time.Now().Add(limit)
	var b [1]byte
	for time.Now().Before(deadline) {
		select {
		case <-stop:
			return
		case <-abort:
			return
		default:
		}
		_ = conn.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		n, err := conn.Read(b[:])
		if n > 0 || (err != nil && !errors.Is(err, os.ErrDeadlineExceeded)) {
			return
		}
	}
}

// kill closes a connection abruptly on purpose.
func (e *Engine) kill(conn net.Conn) {
	e.stats.deaths.Add(1)
	if conn != nil {
		_ = conn.Close()
	}
}
