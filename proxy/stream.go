package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"pdlb"
)

// Stream is a committed streaming answer: the decode's first event has
// arrived and the rest is relayed event by event.
type Stream struct {
	a      *attempt
	l      *leg
	c      *upConn
	sr     *sseReader
	first  []byte // the first event, still in sr's buffer
	merge  bool
	prefix []byte
	ticket Ticket
	idle   time.Duration
	// deadline ends the request (timeouts.request).
	deadline time.Time
	scratch  []byte
	now      func() time.Time
	// firstAt is when the first event arrived (set only when traced).
	firstAt time.Time
	// resumable: a break mid-way is returned, not written (Exchange.
	// Resumable). keepLast keeps in last a copy of the last event written
	// for RelayResult.Last (the buffer is reused, like scratch), unless the
	// caller keeps it itself (KeepLast).
	resumable, keepLast bool
	last                []byte
}

// KeepLast says whether Relay copies each event for RelayResult.Last: a
// caller whose EventWriter keeps what it wrote (a migrated or batch stream's)
// turns it off, so each event is copied once, not twice.
func (s *Stream) KeepLast(keep bool) { s.keepLast = keep && s.resumable }

// openDecodeStream reads the decode's first event before firstByte.
func (a *attempt) openDecodeStream(firstByte time.Time) (*Stream, *UpstreamError) {
	if ct := a.dl.resp.Header.ContentType(); !bytes.HasPrefix(ct, eventStreamType) {
		// A 200 that is not an event stream (a proxy's error page, say) is a
		// broken decode, not an answer to relay.
		return nil, a.dl.fail(KindProtocol, fmt.Errorf("answered 200 with content type %q to a stream request", ct))
	}
	r, c, err := a.dl.openStream()
	if err != nil {
		return nil, err
	}
	sr := acquireSSEReader(r)
	if e := c.SetReadDeadline(firstByte); e != nil {
		releaseSSEReader(sr)
		a.dl.resp.CloseBodyStream()
		return nil, a.dl.fail(KindProtocol, e)
	}
	ev, rerr := sr.next()
	if rerr != nil {
		releaseSSEReader(sr)
		a.dl.resp.CloseBodyStream()
		if isEOF(rerr) {
			rerr = io.ErrUnexpectedEOF
		}
		return nil, a.dl.fail(KindProtocol, rerr)
	}
	s := &a.stream
	s.l, s.c, s.sr, s.first = &a.dl, c, sr, ev
	s.idle, s.deadline, s.now = a.t.DecodeIdle, a.deadline, a.p.now
	s.firstAt = a.stamp()
	return s, nil
}

// reset readies a pooled attempt's stream for reuse, keeping its buffers.
func (s *Stream) reset() {
	*s = Stream{scratch: s.scratch[:0], prefix: s.prefix[:0], last: s.last[:0]}
}

// RelayResult says how a relayed stream ended.
type RelayResult struct {
	Events int
	Bytes  int
	// Err is nil for a clean end ([DONE] or the engine closing the body),
	// ErrClientGone when the client left, an *UpstreamError when the decode broke.
	Err error
	// Resumable says that the decode of a resumable stream broke after
	// events reached the client and that no error event was written: the
	// caller continues the stream or ends it (WriteStreamError). Last is a
	// copy of the last event written (without its blank line).
	Resumable bool
	Last      []byte
}

// Relay copies the stream to the client, one flush per event, and ends the
// client's stream right after "data: [DONE]" even if the engine keeps its
// connection open. A decode failure mid-stream becomes a final SSE error
// event. client may be nil (no write deadlines).
func (s *Stream) Relay(w EventWriter, client net.Conn, writeTimeout time.Duration) (res RelayResult) {
	defer func() { s.finish(res) }()
	ev := s.first
	for {
		if client != nil && writeTimeout > 0 {
			// A slow reader gets writeTimeout per event, and never more
			// than the request's own deadline.
			client.SetWriteDeadline(earlier(s.now().Add(writeTimeout), s.deadline))
		}
		done := isDone(ev)
		if done {
			s.l.ended = true // whatever the client does now
		}
		n, err := s.writeEvent(w, ev, done)
		res.Bytes += n
		if err == nil {
			err = w.Flush()
		}
		if err != nil {
			res.Err = ErrClientGone
			return res
		}
		res.Events++
		if s.keepLast {
			s.last = append(s.last[:0], ev...) // ev is gone after the next read
		}
		if done {
			s.release(finishAfterDone(s.l, s.sr))
			return res
		}
		s.c.SetReadDeadline(earlier(s.now().Add(s.idle), s.deadline))
		var rerr error
		ev, rerr = s.sr.next()
		if rerr != nil {
			if isEOF(rerr) {
				s.release(true)
				return res
			}
			kind := classify(rerr)
			if s.l.isCancelled() {
				kind = KindCancelled
			}
			uerr := &UpstreamError{Backend: s.l.b, Kind: kind, Err: fmtStreamErr(rerr)}
			res.Err = uerr
			s.release(false)
			if s.resumable && kind != KindCancelled && (s.deadline.IsZero() || s.now().Before(s.deadline)) {
				res.Resumable = true
				if s.keepLast {
					res.Last = bytes.Clone(s.last)
				}
				return res
			}
			res.Bytes += WriteStreamError(w, uerr)
			return res
		}
	}
}

// writeEvent writes one event and its boundary in a single Write, so a
// chunked client writer sends each event as one chunk. A writer that can
// send the event and the boundary together without copying them into one
// buffer (EventSender) gets the engine's bytes as they are.
func (s *Stream) writeEvent(w EventWriter, ev []byte, done bool) (int, error) {
	d, ok := eventData(ev)
	merged := s.merge && !done && ok
	if merged {
		s.scratch = append(s.scratch[:0], "data: "...)
		s.scratch = appendMergedObject(s.scratch, d, logprobPath, b2s(s.prefix))
		ev = s.scratch
	}
	if es, ok := w.(EventSender); ok {
		return es.SendEvent(ev)
	}
	if !merged {
		s.scratch = append(s.scratch[:0], ev...)
	}
	s.scratch = append(s.scratch, eventBoundary...)
	return w.Write(s.scratch)
}

// EventWriter is where a relay writes: a bufio.Writer, or the router's
// chunked writer on a hijacked client connection.
type EventWriter interface {
	Write(p []byte) (int, error)
	Flush() error
}

// EventSender is an EventWriter that writes an event followed by the blank
// line that ends it ("\n\n") as one unit, without copying the event.
type EventSender interface {
	SendEvent(ev []byte) (int, error)
}

// release ends the upstream body; the connection is pooled only when the
// body ended cleanly.
func (s *Stream) release(clean bool) {
	if s.sr == nil {
		return
	}
	releaseSSEReader(s.sr)
	s.sr = nil
	s.l.closeStream(clean)
}

func (s *Stream) finish(res RelayResult) {
	s.release(false)
	if s.l == nil {
		return
	}
	var uerr *UpstreamError
	switch err := res.Err; {
	case err == nil:
	case errors.As(err, &uerr):
	default:
		uerr = &UpstreamError{Backend: s.l.b, Kind: KindCancelled, Err: err}
	}
	l := s.l
	s.l = nil
	if uerr != nil {
		// The engine may still be generating: abort it (once the attempt
		// is over) when pdlb left it, not when it broke by itself.
		switch {
		case errors.Is(res.Err, ErrClientGone):
			l.giveUp(false)
			if s.a != nil {
				s.a.setWhy(AbortClientGone)
			}
		case uerr.Kind == KindTimeout:
			l.giveUp(true)
		}
	}
	if a := s.a; a != nil {
		a.p.settle(s.ticket, uerr)
		s.a = nil
		a.report(l, Decode, s.firstAt, res.Bytes, res.Events, uerr)
		a.unref()
	} else {
		s.ticket.Done(uerr)
	}
}

// finishAfterDone checks, without waiting, whether the engine also ended
// the body right after [DONE] (then the connection can be reused).
func finishAfterDone(l *leg, sr *sseReader) bool {
	l.mu.Lock()
	c := l.conn
	l.mu.Unlock()
	if c == nil || sr.start != sr.end {
		return false
	}
	c.SetReadDeadline(aLongTimeAgoDeadline)
	_, err := sr.next()
	return isEOF(err)
}

var aLongTimeAgoDeadline = time.Unix(1, 0)

func isEOF(err error) bool { return errors.Is(err, io.EOF) }

func fmtStreamErr(err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.New("stream broke off: unexpected EOF")
	}
	return err
}

// WriteStreamError ends a client's stream with err as a final SSE error
// event (what Relay does when the decode breaks), and returns the bytes written.
func WriteStreamError(w EventWriter, err *UpstreamError) int {
	n, _ := w.Write(sseError(err.Error(), err.ClientStatus()))
	w.Flush()
	return n
}

// sseError renders pdlb's error shape as a final SSE event.
func sseError(msg string, code int) []byte {
	out := append(make([]byte, 0, len(msg)+96), "data: "...)
	out = pdlb.AppendError(out, code, pdlb.ErrUpstream, msg)
	return append(out, "\n\n"...)
}

var sseReaderPool sync.Pool

func acquireSSEReader(r io.Reader) *sseReader {
	sr, _ := sseReaderPool.Get().(*sseReader)
	if sr == nil {
		sr = new(sseReader)
	}
	sr.reset(r)
	return sr
}

func releaseSSEReader(sr *sseReader) {
	sr.r = nil
	if cap(sr.buf) > 4*sseInitialBuf {
		sr.buf = nil
	}
	sseReaderPool.Put(sr)
}
