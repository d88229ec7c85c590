package proxy

import (
	"crypto/tls"
	"errors"
	"net"
	"sync/atomic"
	"time"

	"pdlb/config"
)

// UpstreamTLS is the TLS pdlb speaks to https:// backends: on the legs'
// owned connections (upstream.go) and on plain calls (health checks,
// load and DP-rank polls, info and broadcasts: call.go) alike, since both
// dial through secure. Its settings are swapped whole on reload: new
// connections use the new ones, pooled connections keep theirs until they
// are dropped (idle a few seconds). A nil *UpstreamTLS trusts the
// system's pool and sends no client certificate.
type UpstreamTLS struct {
	cfg atomic.Pointer[tls.Config]
}

// NewUpstreamTLS loads c's files; errors name the key at fault.
func NewUpstreamTLS(c config.UpstreamTLS) (*UpstreamTLS, error) {
	cfg, err := UpstreamTLSConfig(c)
	if err != nil {
		return nil, err
	}
	u := &UpstreamTLS{}
	u.cfg.Store(cfg)
	return u, nil
}

// UpstreamTLSConfig builds the client config c describes, for Set; a
// reload builds it first and sets it once the whole reload succeeded.
func UpstreamTLSConfig(c config.UpstreamTLS) (*tls.Config, error) {
	cfg := defaultUpstreamTLS()
	if c.CAFile != "" {
		pool, err := config.LoadCAPool("upstream_tls.ca_file", c.CAFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if c.CertFile != "" || c.KeyFile != "" {
		pair, err := config.LoadKeyPair("upstream_tls.cert_file", c.CertFile, "upstream_tls.key_file", c.KeyFile)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	cfg.InsecureSkipVerify = c.InsecureSkipVerify
	return cfg, nil
}

func defaultUpstreamTLS() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		// Resumption makes a reconnect (an engine's keep-alive ran out, a
		// leg was cut) one round trip and no signature. The cache belongs
		// to one config: a session from before a reload is never resumed
		// under a new CA it was not verified against.
		ClientSessionCache: tls.NewLRUClientSessionCache(0),
	}
}

// Set puts cfg in force for new connections.
func (u *UpstreamTLS) Set(cfg *tls.Config) { u.cfg.Store(cfg) }

// config is the config for one connection to serverName.
func (u *UpstreamTLS) config(serverName string) *tls.Config {
	var base *tls.Config
	if u != nil {
		base = u.cfg.Load()
	}
	if base == nil {
		base = defaultUpstreamTLS()
	}
	cfg := base.Clone() // once per dial, not per request
	cfg.ServerName = serverName
	return cfg
}

// secure runs a TLS handshake on conn, freshly dialled, to finish by
// deadline (the dial's: timeouts.connect bounds the two together; zero
// is none), and closes conn when it fails. serverName (the backend URL's
// host) is what the engine's certificate must name.
func (u *UpstreamTLS) secure(conn net.Conn, serverName string, deadline time.Time) (net.Conn, error) {
	tc := tls.Client(conn, u.config(serverName))
	conn.SetDeadline(deadline)
	if err := tc.Handshake(); err != nil {
		conn.Close()
		return nil, &HandshakeError{Err: err}
	}
	// Every use of the connection sets its own deadlines.
	conn.SetDeadline(time.Time{})
	return tc, nil
}

// deadlineAfter is the deadline of a dial bounded by d (zero: none).
func deadlineAfter(d time.Duration) time.Time {
	if d <= 0 {
		return time.Time{}
	}
	return time.Now().Add(d)
}

// HandshakeError is a TLS handshake with an engine that failed: its
// certificate did not verify (wrong CA, expired, another name), or the
// engine refused pdlb's (none sent under mTLS, an unknown CA). It is a
// connect failure: nothing reached the engine's application.
//
// It has no Unwrap on purpose: the error a client and the log see is
// cut to its root cause (UpstreamError), and "TLS handshake" is the part
// of this one that says what failed.
type HandshakeError struct{ Err error }

func (e *HandshakeError) Error() string { return "TLS handshake: " + e.Err.Error() }

// refusedHandshake turns the alert an engine sends at the first read
// after a TLS 1.3 handshake into the handshake failure it is: a TLS 1.3
// client finishes its side before the server has checked the client's
// certificate, so an engine that refuses it ("certificate required",
// "unknown certificate authority") says so only then. crypto/tls reports
// a peer's alert as a *net.OpError with Op "remote error".
func refusedHandshake(err error) *HandshakeError {
	if err == nil {
		return nil
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "remote error" {
		return &HandshakeError{Err: err}
	}
	return nil
}

// refusalConn is a connection of a backend's plain client (call.go) that
// keeps the alert an engine refused pdlb's certificate with: fasthttp
// reports any error before the first byte of an answer as the server
// closing the connection, and Call puts the alert back.
type refusalConn struct {
	*tls.Conn // Handshake promoted: fasthttp takes it as TLS already
	refused   *atomic.Pointer[HandshakeError]
}

func (c *refusalConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if err != nil {
		if herr := refusedHandshake(err); herr != nil {
			c.refused.Store(herr)
		}
	}
	return n, err
}
