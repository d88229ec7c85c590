package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// upstream owns the keep-alive connections to one backend.
//
// It exists instead of fasthttp.HostClient because fasthttp's client has no
// cancellation: to cut a leg when its sibling fails or the client leaves,
// pdlb must hold the very net.Conn the leg uses and close it. Requests and
// responses are still encoded and parsed by fasthttp.
type upstream struct {
	addr        string
	dialTimeout time.Duration
	// secure, set for an https:// backend, runs the TLS handshake on each
	// new connection, by the dial's deadline; pooled ones are reused as
	// they are.
	secure func(net.Conn, time.Time) (net.Conn, error)
	// maxIdleAge drops pooled connections the backend has likely closed
	// already (uvicorn's keep-alive timeout is 5 s).
	maxIdleAge time.Duration
	maxIdle    int
	now        func() time.Time

	mu   sync.Mutex
	idle []*upConn
}

type upConn struct {
	net.Conn
	br       *bufio.Reader
	lastUsed time.Time
	// handshaking is set on a fresh TLS connection until its first answer:
	// an engine may refuse pdlb's certificate only then (refusedHandshake).
	handshaking bool
}

// upstreamReadBuf holds a response head (engines send a few hundred bytes)
// and batches body reads; it lives as long as the connection, so it is
// small: 5,000 concurrent streams hold 5,000 of them. A larger head is read
// through upstreamLargeHead (readHead). Requests are written without a
// buffer (leg.writeRequest).
const (
	upstreamReadBuf   = 2 << 10
	upstreamLargeHead = 64 << 10
)

// readHead reads a response head. A head larger than the connection's
// buffer (a proxy in front of the engine adding headers, say) is read
// again through a large buffer layered on the small one, which nothing
// has consumed yet; the connection keeps the large one.
func (c *upConn) readHead(h *fasthttp.ResponseHeader) error {
	if c.handshaking {
		// fasthttp reports any error on the first byte as io.EOF; the
		// engine's alert is looked at before it does.
		c.handshaking = false
		if _, err := c.br.Peek(1); err != nil {
			if herr := refusedHandshake(err); herr != nil {
				return herr
			}
		}
	}
	err := h.Read(c.br)
	var small *fasthttp.ErrSmallBuffer
	if errors.As(err, &small) && c.br.Size() < upstreamLargeHead {
		c.br = bufio.NewReaderSize(c.br, upstreamLargeHead)
		err = h.Read(c.br)
	}
	return err
}

func newUpstream(addr string, dialTimeout time.Duration) *upstream {
	return &upstream{addr: addr, dialTimeout: dialTimeout, maxIdleAge: 4 * time.Second, maxIdle: 1024, now: time.Now}
}

// get returns a pooled connection (reused=true) or dials a new one.
func (u *upstream) get(deadline time.Time) (c *upConn, reused bool, err error) {
	now := u.now()
	u.mu.Lock()
	for n := len(u.idle); n > 0; n = len(u.idle) {
		c = u.idle[n-1]
		u.idle[n-1] = nil
		u.idle = u.idle[:n-1]
		if now.Sub(c.lastUsed) < u.maxIdleAge {
			u.mu.Unlock()
			return c, true, nil
		}
		c.Close()
	}
	u.mu.Unlock()
	c, err = u.dial(deadline)
	return c, false, err
}

// dial connects (and shakes hands, for https://) within timeouts.connect,
// and never past the leg's deadline (zero: none): a request's bound holds
// also while its engine's address does not answer. A dial the deadline cut
// short is a timeout (os.ErrDeadlineExceeded), not a connect failure.
func (u *upstream) dial(deadline time.Time) (*upConn, error) {
	limit := deadlineAfter(u.dialTimeout)
	cut := false
	if !deadline.IsZero() && (limit.IsZero() || deadline.Before(limit)) {
		limit, cut = deadline, true
	}
	d := net.Dialer{Deadline: limit}
	conn, err := d.Dial("tcp", u.addr)
	if err == nil && u.secure != nil {
		conn, err = u.secure(conn, limit)
	}
	if err != nil {
		if cut && !time.Now().Before(limit) {
			return nil, fmt.Errorf("connecting: %w (%v)", os.ErrDeadlineExceeded, err)
		}
		return nil, err
	}
	return &upConn{Conn: conn, br: bufio.NewReaderSize(conn, upstreamReadBuf), handshaking: u.secure != nil}, nil
}

// put returns a connection whose last response was read completely.
func (u *upstream) put(c *upConn) {
	// The deadline is left as is: every use sets its own first.
	c.lastUsed = u.now()
	u.mu.Lock()
	if len(u.idle) < u.maxIdle {
		u.idle = append(u.idle, c)
		c = nil
	}
	u.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// closeIdle closes every pooled connection (backend removed, shutdown).
func (u *upstream) closeIdle() {
	u.mu.Lock()
	idle := u.idle
	u.idle = nil
	u.mu.Unlock()
	for _, c := range idle {
		c.Close()
	}
}
