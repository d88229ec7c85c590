package router

import (
	"bufio"
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
// chunk and one flush per event, and closes the connection at the end of
// the stream (the head says "Connection: close").

// chunkWriter frames each Write as one HTTP/1.1 chunk.
type chunkWriter struct {
	bw  *bufio.Writer
	hex []byte
}

func (c *chunkWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.hex = strconv.AppendInt(c.hex[:0], int64(len(p)), 16)
	c.hex = append(c.hex, '\r', '\n')
	c.bw.Write(c.hex)
	c.bw.Write(p)
	_, err := c.bw.WriteString("\r\n")
	return len(p), err
}

func (c *chunkWriter) Flush() error { return c.bw.Flush() }

// close ends the chunked body.
func (c *chunkWriter) close() error {
	c.bw.WriteString("0\r\n\r\n")
	return c.bw.Flush()
}

// Events larger than the buffer bypass it (bufio writes them straight
// through), so it can stay small: 5,000 streams hold 5,000 of them.
var streamWriters = sync.Pool{New: func() any { return &chunkWriter{bw: bufio.NewWriterSize(nil, 2<<10), hex: make([]byte, 0, 18)} }}

func acquireChunkWriter(c net.Conn) *chunkWriter {
	w := streamWriters.Get().(*chunkWriter)
	w.bw.Reset(c)
	return w
}

func releaseChunkWriter(w *chunkWriter) {
	w.bw.Reset(nil)
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
	w := acquireChunkWriter(c)
	resp.Write(w.bw)
	w.bw.Flush()
	releaseChunkWriter(w)
}
