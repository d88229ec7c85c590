package service

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"pdlb/config"
)

// listenerTLS is one listener's TLS (server.tls or admin.tls). Its
// certificate and client CA pool are one value swapped whole, read by
// every new handshake (GetConfigForClient): a reload changes what new
// handshakes get, open connections keep what they negotiated, and no
// handshake ever pairs a new certificate with an old CA pool.
type listenerTLS struct {
	// key is the config prefix ("server.tls"), in logs and errors.
	key string
	// listener names it in log lines ("serving", "admin").
	listener string
	log      zerolog.Logger
	// base is what tls.Server gets; it only points to the current state.
	base *tls.Config

	// mu serialises loads: a reload and a file change never interleave.
	mu    sync.Mutex
	state atomic.Pointer[tlsState]
}

// tlsState is one loaded set of files and the config built from them.
type tlsState struct {
	files config.ListenerTLS
	cfg   *tls.Config
	leaf  *x509.Certificate
}

// newListenerTLS loads c's files; nil when c does not turn TLS on.
func newListenerTLS(key, listener string, c config.ListenerTLS, log zerolog.Logger) (*listenerTLS, error) {
	if !c.Enabled() {
		return nil, nil
	}
	l := &listenerTLS{key: key, listener: listener, log: log}
	l.base = &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return l.state.Load().cfg, nil
		},
	}
	st, err := l.prepare(c)
	if err != nil {
		return nil, err
	}
	l.commit(st)
	return l, nil
}

// prepare reads c's files and builds the config new handshakes will get;
// nothing changes until commit.
func (l *listenerTLS) prepare(c config.ListenerTLS) (*tlsState, error) {
	pair, err := config.LoadKeyPair(l.key+".cert_file", c.CertFile, l.key+".key_file", c.KeyFile)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		// TLS 1.2 and later with Go's default cipher suites: what every
		// client of the last decade speaks, and nothing known weak.
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"http/1.1"},
		Certificates: []tls.Certificate{pair},
	}
	if c.ClientCAFile != "" {
		pool, err := config.LoadCAPool(l.key+".client_ca_file", c.ClientCAFile)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return &tlsState{files: c, cfg: cfg, leaf: pair.Leaf}, nil
}

// commit puts st in force for new handshakes and logs what changed.
func (l *listenerTLS) commit(st *tlsState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.commitLocked(st)
}

func (l *listenerTLS) commitLocked(st *tlsState) {
	old := l.state.Swap(st)
	changed := old == nil || !old.leaf.Equal(st.leaf) || old.files != st.files ||
		(old.cfg.ClientCAs == nil) != (st.cfg.ClientCAs == nil) ||
		(old.cfg.ClientCAs != nil && !old.cfg.ClientCAs.Equal(st.cfg.ClientCAs))
	if !changed {
		return
	}
	ev := l.log.Info()
	if time.Now().After(st.leaf.NotAfter) {
		ev = l.log.Warn()
	}
	ev.Str("listener", l.listener).Str("cert_file", st.files.CertFile).Str("subject", st.leaf.Subject.String()).
		Time("not_after", st.leaf.NotAfter).Bool("client_certificates", st.cfg.ClientCAs != nil).
		Bool("expired", time.Now().After(st.leaf.NotAfter)).Msg("TLS certificate loaded")
}

// reloadFiles reads the files in force again (they changed on disk). A
// pair that does not load keeps the running one, with an error naming
// the file; cert-manager writing the certificate and then the key is
// read again at the second write.
func (l *listenerTLS) reloadFiles() {
	l.mu.Lock()
	defer l.mu.Unlock()
	st, err := l.prepare(l.state.Load().files)
	if err != nil {
		l.log.Error().Err(err).Str("listener", l.listener).Msg("TLS files changed but do not load; keeping the running certificate")
		return
	}
	l.commitLocked(st)
}

// files is what a certificate watch must watch.
func (l *listenerTLS) files() []string {
	f := l.state.Load().files
	return []string{f.CertFile, f.KeyFile, f.ClientCAFile}
}

// listen serves TLS on ln.
func (l *listenerTLS) listen(ln net.Listener) net.Listener {
	return &tlsListener{Listener: ln, l: l}
}

// tlsListener hands out server-side TLS connections that log a failed
// handshake themselves.
type tlsListener struct {
	net.Listener
	l *listenerTLS
}

func (t *tlsListener) Accept() (net.Conn, error) {
	c, err := t.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &tlsConn{Conn: tls.Server(c, t.l.base), l: t.l}, nil
}

// tlsConn runs the handshake at its first read (in the connection's own
// goroutine, under fasthttp's read deadline, never in Accept) so that a
// failure is logged as what it is: otherwise fasthttp reports it as a
// malformed request and writes an error answer onto a connection that
// has no TLS session. The promoted *tls.Conn methods keep fasthttp's
// IsTLS and TLSConnectionState working.
type tlsConn struct {
	*tls.Conn
	l      *listenerTLS
	shaken bool
}

func (c *tlsConn) Read(b []byte) (int, error) {
	if !c.shaken {
		c.shaken = true
		if err := c.Conn.Handshake(); err != nil {
			c.logFailure(err)
			// As a client that left: fasthttp closes without an answer.
			return 0, io.EOF
		}
	}
	return c.Conn.Read(b)
}

// SyscallConn is the TCP socket's, so that the proxy's watch for a
// client that left (proxy/watch_linux.go) covers TLS connections too: it
// only peeks at the socket, never reads from it, so the TLS stream is
// not disturbed. A client that closes with a close_notify alert shows the
// watch data, not the end of the stream, and is noticed at the next write
// (README "TLS").
func (c *tlsConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.NetConn().(syscall.Conn)
	if !ok {
		return nil, errors.New("TLS connection over a non-socket")
	}
	return sc.SyscallConn()
}

// logFailure logs a failed handshake at warn (a wrong CA, an expired or
// missing client certificate, a plain-HTTP client), except a client that
// closed or timed out before saying anything (port scanners, TCP probes):
// debug.
func (c *tlsConn) logFailure(err error) {
	ev := c.l.log.Warn()
	if errors.Is(err, io.EOF) || errors.Is(err, os.ErrDeadlineExceeded) {
		ev = c.l.log.Debug()
	}
	ev.Err(err).Str("listener", c.l.listener).Str("remote", c.RemoteAddr().String()).Msg("TLS handshake failed")
}
