package proxy

import (
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/valyala/bytebufferpool"
	"github.com/valyala/fasthttp"
)

// errCancelled is the cause recorded when pdlb closes a leg on purpose.
var errCancelled = errors.New("cancelled by pdlb")

// maxUpstreamBody caps a non-streamed backend answer held in memory.
const maxUpstreamBody = 512 << 20

// leg is one upstream exchange (prefill or decode) of a PD request. It owns
// the connection it uses so that another goroutine can cut it (cancel).
type leg struct {
	b    *Backend
	resp fasthttp.Response
	// head is the request head, written with the body in one writev.
	head []byte
	bufs net.Buffers
	vec  [2][]byte

	mu        sync.Mutex
	conn      *upConn
	cancelled bool
	cause     error

	// What the engine may still be doing, for the abort (abort.go); each
	// is written by the goroutine driving the leg and read once the
	// attempt is over. sent: the request reached the engine; ended: its
	// answer did too (read to the end, or an error status); gaveUp: pdlb
	// closed the leg before that (cut, or its deadline passed: timedOut).
	sent, ended, gaveUp, timedOut bool
}

// reset readies the leg for reuse (its attempt is done): a connection still
// attached was not read to a clean end and is closed.
func (l *leg) reset() {
	l.mu.Lock()
	c := l.conn
	l.conn = nil
	l.mu.Unlock()
	if c != nil {
		c.Close()
	}
	l.head = l.head[:0]
	l.vec = [2][]byte{}
	l.bufs = nil
	l.resp.Reset()
	l.b, l.cancelled, l.cause = nil, false, nil
	l.sent, l.ended, l.gaveUp, l.timedOut = false, false, false, false
}

// cancel closes the leg's connection (now or as soon as it has one) so any
// read or write on it fails at once.
func (l *leg) cancel(cause error) {
	l.mu.Lock()
	if l.cancelled {
		l.mu.Unlock()
		return
	}
	l.cancelled, l.cause = true, cause
	c := l.conn
	l.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

func (l *leg) isCancelled() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cancelled
}

func (l *leg) attach(c *upConn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cancelled {
		c.Close()
		return false
	}
	l.conn = c
	return true
}

// detach hands the connection back to the pool (clean=true) or closes it.
func (l *leg) detach(clean bool) {
	l.mu.Lock()
	c := l.conn
	l.conn = nil
	cancelled := l.cancelled
	l.mu.Unlock()
	if c == nil {
		return
	}
	if clean && !cancelled && !l.resp.ConnectionClose() {
		l.b.up.put(c)
		return
	}
	c.Close()
}

func (l *leg) fail(kind Kind, err error) *UpstreamError {
	if l.isCancelled() {
		kind = KindCancelled
		if l.cause != nil {
			err = l.cause
		}
	} else if kind == KindProtocol {
		kind = classify(err)
	}
	if kind == KindCancelled || kind == KindTimeout {
		l.giveUp(kind == KindTimeout)
	}
	l.detach(false)
	return &UpstreamError{Backend: l.b, Kind: kind, Err: err}
}

// start sends the request and reads the response headers before deadline.
// A reused connection that the backend had already closed is retried once
// on a freshly dialled one: nothing reached the engine's application then.
func (l *leg) start(path string, body []byte, requestID string, extra []byte, deadline time.Time) *UpstreamError {
	l.head = appendRequestHead(l.head[:0], path, l.b.hostHeader, len(body), requestID, l.b.auth.legHeader(), extra)
	for attempt := 0; ; attempt++ {
		var c *upConn
		var reused bool
		var err error
		if attempt == 0 {
			c, reused, err = l.b.up.get(deadline)
		} else {
			c, err = l.b.up.dial(deadline)
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) { // the leg's deadline, not timeouts.connect
				return l.fail(KindTimeout, err)
			}
			return l.fail(KindConnect, err)
		}
		if !l.attach(c) {
			return l.fail(KindCancelled, errCancelled)
		}
		if err := c.SetDeadline(deadline); err != nil {
			return l.fail(KindConnect, err)
		}
		if err = l.writeRequest(c, body); err == nil {
			l.sent = true
			err = c.readHead(&l.resp.Header)
			if err == nil {
				return nil
			}
		}
		if reused && attempt == 0 && isStaleConn(err) && !l.isCancelled() {
			// The engine closed a pooled connection; when it restarted,
			// every pooled connection is dead: drop them all and dial.
			l.detach(false)
			l.b.up.closeIdle()
			continue
		}
		if isStaleConn(err) && !reused {
			return l.fail(KindConnect, err)
		}
		var herr *HandshakeError
		if errors.As(err, &herr) {
			return l.fail(KindConnect, err)
		}
		return l.fail(KindProtocol, err)
	}
}

// isStaleConn matches the errors of a keep-alive connection the peer closed.
func isStaleConn(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed)
}

func (l *leg) status() int { return l.resp.Header.StatusCode() }

func (l *leg) ok() bool { s := l.status(); return s >= 200 && s < 300 }

// readBody reads the whole (non-streamed) body before deadline (zero: keep
// the deadline set for the headers, saving a timer update on the hot path)
// and returns the connection to the pool.
func (l *leg) readBody(deadline time.Time) *UpstreamError {
	l.mu.Lock()
	c := l.conn
	l.mu.Unlock()
	if c == nil {
		return l.fail(KindCancelled, errCancelled)
	}
	if !deadline.IsZero() {
		if err := c.SetReadDeadline(deadline); err != nil {
			return l.fail(KindProtocol, err)
		}
	}
	err := l.resp.ReadBody(c.br, maxUpstreamBody)
	if err == nil && l.resp.Header.ContentLength() == -1 {
		err = l.resp.Header.ReadTrailer(c.br)
	}
	if err != nil {
		return l.fail(KindProtocol, err)
	}
	l.ended = true
	l.detach(true)
	return nil
}

// giveUp notes that pdlb closed the leg while the engine may still be
// working on it: the attempt aborts it there once it is over.
func (l *leg) giveUp(timedOut bool) {
	if l.sent && !l.ended && !l.gaveUp {
		l.gaveUp, l.timedOut = true, timedOut
	}
}

// statusError reads an error answer's body (bounded) and describes it.
func (l *leg) statusError(deadline time.Time) *UpstreamError {
	status := l.status()
	l.ended = true // the engine answered: whatever follows, it is done
	if e := l.readBody(deadline); e != nil {
		e.Kind, e.Status = KindStatus, status
		return e
	}
	return &UpstreamError{Backend: l.b, Kind: KindStatus, Status: status,
		Body: append([]byte(nil), capBytes(l.resp.Body(), 4096)...), ContentType: append([]byte(nil), l.resp.Header.ContentType()...),
		RetryAfter: append([]byte(nil), l.resp.Header.Peek(fasthttp.HeaderRetryAfter)...)}
}

// openStream switches the response to streaming: the body is read event by
// event through the returned reader.
func (l *leg) openStream() (io.Reader, *upConn, *UpstreamError) {
	l.mu.Lock()
	c := l.conn
	l.mu.Unlock()
	if c == nil {
		return nil, nil, l.fail(KindCancelled, errCancelled)
	}
	l.resp.StreamBody = true
	if err := l.resp.ReadBody(c.br, 0); err != nil {
		return nil, nil, l.fail(KindProtocol, err)
	}
	return l.resp.BodyStream(), c, nil
}

// closeStream ends a streamed body; the connection is reused only when the
// body was read to its end.
func (l *leg) closeStream(atEOF bool) {
	if atEOF {
		l.ended = true
	}
	l.resp.CloseBodyStream()
	l.detach(atEOF)
}

// writeRequest sends the head and the body in one vectored write: the
// body (the injected copy, in the attempt's buffer) is not copied again.
func (l *leg) writeRequest(c *upConn, body []byte) error {
	if l.b.up.secure != nil && len(body) > 0 {
		return l.writeRequestTLS(c, body)
	}
	l.vec = [2][]byte{l.head, body}
	l.bufs = l.vec[:]
	if len(body) == 0 {
		l.bufs = l.vec[:1]
	}
	_, err := l.bufs.WriteTo(c.Conn)
	return err
}

// writeRequestTLS sends the head and the body in one Write: a *tls.Conn
// has no vectored write, and each buffer would be a record and a system
// call of its own (the engine then reads the head without its body).
func (l *leg) writeRequestTLS(c *upConn, body []byte) error {
	buf := bytebufferpool.Get()
	buf.B = append(append(buf.B[:0], l.head...), body...)
	_, err := c.Write(buf.B)
	bytebufferpool.Put(buf)
	return err
}

// appendRequestHead renders the head of an engine request. Every leg is a
// JSON POST with a known length, so five lines written directly replace
// fasthttp's general request header (and its buffers, held by every leg of
// every stream in flight). auth and extra hold further header lines, each
// ending in CRLF (the engines' credentials, a traceparent).
func appendRequestHead(dst []byte, path, host string, n int, requestID string, auth, extra []byte) []byte {
	dst = append(dst, "POST "...)
	dst = append(dst, path...)
	dst = append(dst, " HTTP/1.1\r\nHost: "...)
	dst = append(dst, host...)
	dst = append(dst, "\r\nContent-Type: application/json\r\nContent-Length: "...)
	dst = strconv.AppendInt(dst, int64(n), 10)
	if requestID != "" {
		dst = append(dst, "\r\n"+HeaderRequestID+": "...)
		dst = append(dst, requestID...)
	}
	dst = append(dst, "\r\n"...)
	dst = append(dst, auth...)
	dst = append(dst, extra...)
	return append(dst, "\r\n"...)
}

// HeaderRequestID is the request-id header sent to both legs and echoed.
const HeaderRequestID = "X-Request-ID"
