package router

import (
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// Streams are served on the hijacked client connection rather than through
// fasthttp's SetBodyStreamWriter: that path hands every flushed event
// through a pipe to a second goroutine, doubling the goroutine switches per
// event, and keeps the fasthttp worker (with its deep stack) for the whole
// stream. pdlb writes the response head and the chunked body itself, one
// chunk per event, and closes the connection at the end of the stream (the
// head says "Connection: close").

// chunkWriter frames each Write as one HTTP/1.1 chunk and sends it with one
// vectored write (writev): the event is not copied into a write buffer, and
// 5,000 held streams hold no write buffers at all.
type chunkWriter struct {
	conn net.Conn
	// head is the response head, sent together with the first chunk.
	head []byte
	hex  [18]byte
	vec  [5][]byte
	bufs net.Buffers
}

var crlf = []byte("\r\n")

func (c *chunkWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	return len(p), c.writeChunk(len(p), p, crlf)
}

// SendEvent frames an SSE event and its terminating blank line as one
// chunk, sending the event's bytes from where they are (proxy.EventSender).
func (c *chunkWriter) SendEvent(ev []byte) (int, error) {
	return len(ev) + 2, c.writeChunk(len(ev)+2, ev, eventEnd)
}

// writeChunk sends a chunk of n bytes, body then tail (which ends with the
// chunk's CRLF), preceded by the response head if it has not gone out.
func (c *chunkWriter) writeChunk(n int, body, tail []byte) error {
	size := strconv.AppendInt(c.hex[:0], int64(n), 16)
	size = append(size, crlf...)
	c.send(c.head, size, body, tail)
	_, err := c.bufs.WriteTo(c.conn)
	c.head = nil
	return err
}

// eventEnd is the blank line that ends an SSE event, then the chunk's CRLF.
var eventEnd = []byte("\n\n\r\n")

// send queues up to five pieces for one writev, skipping empty ones.
func (c *chunkWriter) send(pieces ...[]byte) {
	c.bufs = c.vec[:0]
	for _, p := range pieces {
		if len(p) > 0 {
			c.bufs = append(c.bufs, p)
		}
	}
}

// Flush is a no-op: every Write has already reached the socket.
func (c *chunkWriter) Flush() error { return nil }

// close ends the chunked body (sending the head first if no chunk went out).
func (c *chunkWriter) close() error {
	c.send(c.head, lastChunk)
	c.head = nil
	_, err := c.bufs.WriteTo(c.conn)
	return err
}

var lastChunk = []byte("0\r\n\r\n")

var streamWriters = sync.Pool{New: func() any { return new(chunkWriter) }}

func acquireChunkWriter(c net.Conn, head []byte) *chunkWriter {
	w := streamWriters.Get().(*chunkWriter)
	w.conn, w.head = c, head
	return w
}

func releaseChunkWriter(w *chunkWriter) {
	w.conn, w.head = nil, nil
	w.vec = [5][]byte{}
	w.bufs = nil
	streamWriters.Put(w)
}

// streamHead is the response head of a relayed stream.
func streamHead(requestID string) []byte {
	h := make([]byte, 0, 256)
	h = append(h, "HTTP/1.1 200 OK\r\nServer: pdlb\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nX-Accel-Buffering: no\r\n"...)
	if requestID != "" {
		h = append(h, "X-Request-ID: "...)
		h = append(h, requestID...)
		h = append(h, "\r\n"...)
	}
	return append(h, "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"...)
}

// writeResponse writes a whole response on a hijacked connection (the
// error answer of a stream request that never committed).
func writeResponse(c net.Conn, resp *fasthttp.Response, timeout time.Duration) {
	if timeout > 0 {
		c.SetWriteDeadline(time.Now().Add(timeout))
	}
	resp.SetConnectionClose()
	resp.WriteTo(c)
}

// rawConn unwraps fasthttp's hijacked connection, so that a relay that
// outlives the hijack handler holds the socket alone and not fasthttp's
// read buffer (server.max_header_bytes) besides.
func rawConn(c net.Conn) net.Conn {
	if u, ok := c.(interface{ UnsafeConn() net.Conn }); ok {
		return u.UnsafeConn()
	}
	return c
}
