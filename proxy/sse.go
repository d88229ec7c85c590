package proxy

import (
	"bytes"
	"errors"
	"io"
)

// sseReader splits an SSE byte stream into events on "\n\n" boundaries,
// however the engine's writes were cut into TCP reads. An event returned by
// next is valid until the following call; the buffer is reused, so reading
// events allocates nothing in steady state.
type sseReader struct {
	r     io.Reader
	buf   []byte
	start int
	end   int
	// scanned is how far past start the buffer holds no boundary.
	scanned int
	max     int
	// err is a read error that came with bytes, held until they are split.
	err error
}

// errEventTooLarge guards memory against an engine that never ends an event.
var errEventTooLarge = errors.New("SSE event larger than the limit")

const (
	// Most events fit; longer ones grow the buffer (returned to the pool
	// only when still small).
	sseInitialBuf = 2 << 10
	sseMaxEvent   = 64 << 20
)

func (s *sseReader) reset(r io.Reader) {
	s.r = r
	s.start, s.end, s.scanned, s.err = 0, 0, 0, nil
	if s.buf == nil {
		s.buf = make([]byte, sseInitialBuf)
	}
	if s.max == 0 {
		s.max = sseMaxEvent
	}
}

var eventBoundary = []byte("\n\n")

// next returns the next non-empty event without its terminating blank line.
// At the end of the stream an unterminated tail is returned as a last event.
func (s *sseReader) next() ([]byte, error) {
	for {
		for {
			from := s.start + s.scanned
			i := bytes.Index(s.buf[from:s.end], eventBoundary)
			if i < 0 {
				// Keep the last byte: it may be the first '\n' of a boundary.
				s.scanned = max(0, s.end-s.start-1)
				break
			}
			ev := s.buf[s.start : from+i]
			s.start = from + i + 2
			s.scanned = 0
			if len(bytes.TrimSpace(ev)) > 0 {
				return ev, nil
			}
		}
		if s.start > 0 {
			copy(s.buf, s.buf[s.start:s.end])
			s.end -= s.start
			s.start = 0
		}
		if s.end == len(s.buf) && s.err == nil {
			if len(s.buf) >= s.max {
				return nil, errEventTooLarge
			}
			grown := make([]byte, min(2*len(s.buf), s.max))
			copy(grown, s.buf[:s.end])
			s.buf = grown
		}
		n, err := 0, s.err
		if err == nil {
			n, err = s.r.Read(s.buf[s.end:])
		}
		s.end += n
		if err != nil && n > 0 {
			// A reader may return the last bytes with the error (a
			// Content-Length body's last read brings io.EOF): they may
			// hold whole events, which come first.
			s.err = err
			continue
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				tail := bytes.TrimSpace(s.buf[s.start:s.end])
				s.start, s.scanned = s.end, 0
				if len(tail) > 0 {
					return tail, nil
				}
			}
			return nil, err
		}
	}
}

// eventData returns the payload of an event's "data:" line and whether the
// event has one. Multi-line events are relayed untouched (ok=false).
func eventData(ev []byte) ([]byte, bool) {
	if !bytes.HasPrefix(ev, dataPrefix) || bytes.IndexByte(ev, '\n') >= 0 {
		return nil, false
	}
	return bytes.TrimSpace(ev[len(dataPrefix):]), true
}

var (
	dataPrefix = []byte("data:")
	doneMarker = []byte("[DONE]")
)

// isDone reports whether ev is the terminating "data: [DONE]" event.
func isDone(ev []byte) bool {
	d, ok := eventData(ev)
	return ok && bytes.Equal(d, doneMarker)
}
