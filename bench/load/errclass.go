package load

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"syscall"

	"github.com/valyala/fasthttp"
)

// Error classes as they appear in reports; statuses appear as "status_<code>".
const (
	ErrTimeout         = "timeout"
	ErrConnection      = "connection"
	ErrNoFreeConns     = "no_free_conns"
	ErrBadBody         = "bad_body"
	ErrStreamError     = "stream_error"     // an SSE event carried {"error": …}
	ErrStreamTruncated = "stream_truncated" // the stream ended without data: [DONE]
	ErrCanceled        = "canceled"
	ErrOther           = "other"
)

// statusClass names a non-200 answer.
func statusClass(code int) string { return "status_" + strconv.Itoa(code) }

// classify maps a client error to a report class. Order matters: a dial timeout is a
// connection problem, not a slow backend.
func classify(err error) string {
	var netErr net.Error
	switch {
	case errors.Is(err, fasthttp.ErrNoFreeConns):
		return ErrNoFreeConns
	case errors.Is(err, fasthttp.ErrDialTimeout):
		return ErrConnection
	case errors.Is(err, fasthttp.ErrTimeout), errors.Is(err, os.ErrDeadlineExceeded),
		errors.Is(err, context.DeadlineExceeded):
		return ErrTimeout
	case errors.As(err, &netErr) && netErr.Timeout():
		return ErrTimeout
	case errors.Is(err, context.Canceled):
		return ErrCanceled
	case errors.Is(err, fasthttp.ErrConnectionClosed), errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, net.ErrClosed):
		return ErrConnection
	case errors.As(err, new(*net.OpError)):
		return ErrConnection
	}
	return ErrOther
}
