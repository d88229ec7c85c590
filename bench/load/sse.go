package load

import (
	"bytes"
	"io"
	"time"
)

// sseReader splits a streamed body into SSE events and notes when each arrived. Engines
// may split or merge events across reads, so events end at a blank line, never at a read.
type sseReader struct {
	buf  []byte // unread bytes; grows to the largest event seen, then is reused
	last []byte // data of the last event other than [DONE]
}

// streamResult is what one stream produced.
type streamResult struct {
	events   int           // data events other than [DONE]
	ttft     time.Duration // from start to the first event
	done     bool          // data: [DONE] was seen
	errEvent bool          // an event carried {"error": …}
}

var doneData = []byte("[DONE]")

// read consumes r until EOF, [DONE] or an error, calling gap for every gap between
// consecutive events. start is when the request was (or was scheduled to be) sent.
func (s *sseReader) read(r io.Reader, start time.Time, gap func(time.Duration)) (streamResult, error) {
	var res streamResult
	var prev time.Time
	s.buf = s.buf[:0]
	for {
		if len(s.buf) == cap(s.buf) {
			s.buf = append(s.buf, make([]byte, max(4096, cap(s.buf)))...)[:len(s.buf)]
		}
		n, err := r.Read(s.buf[len(s.buf):cap(s.buf)])
		now := time.Now()
		s.buf = s.buf[:len(s.buf)+n]
		for {
			end, skip := eventEnd(s.buf)
			if end < 0 {
				break
			}
			data := eventData(s.buf[:end])
			switch {
			case data == nil: // comment or keep-alive: not a token
			case bytes.Equal(data, doneData):
				res.done = true
			default:
				if res.events == 0 {
					res.ttft = now.Sub(start)
				} else {
					gap(now.Sub(prev))
				}
				prev = now
				res.events++
				if isErrorEvent(data) {
					res.errEvent = true
				}
				s.last = append(s.last[:0], data...)
			}
			s.buf = s.buf[:copy(s.buf, s.buf[end+skip:])]
		}
		if res.done {
			return res, nil
		}
		if err == io.EOF {
			return res, nil
		}
		if err != nil {
			return res, err
		}
	}
}

// eventEnd finds the blank line that ends the first event: its index and length.
func eventEnd(b []byte) (int, int) {
	if i := bytes.Index(b, []byte("\n\n")); i >= 0 {
		if j := bytes.Index(b[:i+1], []byte("\r\n\r\n")); j >= 0 {
			return j, 4
		}
		return i, 2
	}
	if j := bytes.Index(b, []byte("\r\n\r\n")); j >= 0 {
		return j, 4
	}
	return -1, 0
}

// eventData returns the payload of the event's data lines (the first one for multi-line
// data, which is all the engines send), or nil when the event has none.
func eventData(ev []byte) []byte {
	for len(ev) > 0 {
		line := ev
		if i := bytes.IndexByte(ev, '\n'); i >= 0 {
			line, ev = ev[:i], ev[i+1:]
		} else {
			ev = nil
		}
		line = bytes.TrimRight(line, "\r")
		if rest, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			return bytes.TrimLeft(rest, " ")
		}
	}
	return nil
}

// isErrorEvent reports whether an event's JSON object starts with an "error" key, the
// shape balancers use to fail a stream after it was committed.
func isErrorEvent(data []byte) bool {
	data = bytes.TrimLeft(data, " \t")
	if len(data) == 0 || data[0] != '{' {
		return false
	}
	return bytes.HasPrefix(bytes.TrimLeft(data[1:], " \t\r\n"), []byte(`"error"`))
}
