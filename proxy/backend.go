package proxy

import (
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"pdlb/config"
)

// Role is a backend's part in a PD request.
type Role uint8

const (
	// Prefill engines compute the prompt's KV cache.
	Prefill Role = iota + 1
	// Decode engines pull the KV cache and generate tokens.
	Decode
)

func (r Role) String() string {
	if r == Prefill {
		return "prefill"
	}
	return "decode"
}

// Backend is one engine: its address, its connections, its breaker and the
// counters selection and the admin API read.
type Backend struct {
	// URL as configured, e.g. "http://10.0.0.1:30000".
	URL  string
	Role Role
	// Host is the URL's host as engines expect it in bootstrap_host:
	// lower-cased, IPv6 in brackets ("[::1]").
	Host string
	// key is the URL's normalised form (config.BackendURL.Key): two
	// spellings of one engine are one backend.
	key string
	// bootstrap is replaced whole on reload while requests read it.
	bootstrap atomic.Pointer[Bootstrap]

	hostHeader string
	// auth is the credentials every leg and call presents (set before use).
	auth *EngineAuth
	up   *upstream
	// plain serves the non-PD routes (info, broadcast, health checks).
	plain *fasthttp.HostClient
	// refused is the last alert an https:// engine refused pdlb's
	// certificate with on a plain call (refusalConn).
	refused atomic.Pointer[HandshakeError]
	// breaker is swapped on reload; nil when breakers are off.
	breaker atomic.Pointer[Breaker]

	inflight atomic.Int64
	selected atomic.Uint64
	// dp counts in flight per DP rank once the DP size is known (dprank.go).
	dp atomic.Pointer[dpLoad]
	// engineLoad is the engine's own running+waiting count, -1 unknown
	// (engineload.go).
	engineLoad atomic.Int64
	draining   atomic.Bool
	// unhealthy is set by active health checks.
	unhealthy atomic.Bool
	// noAbortUntil (Unix ns) is when the engine, which answered 404 to
	// /abort_request, may be asked again (abort.go); 0: it may now.
	noAbortUntil atomic.Int64
	// observed is the LegObserver's state for this backend (router: its
	// metric series), kept here so each leg finds it with one load rather
	// than a map lookup hashing the URL.
	observed atomic.Value
}

// NewBackend parses rawURL (config.ParseBackendURL) and prepares the
// backend's connection pool; an https:// backend trusts the system's pool.
func NewBackend(rawURL string, role Role, dialTimeout time.Duration) (*Backend, error) {
	return NewBackendTLS(rawURL, role, dialTimeout, nil)
}

// NewBackendTLS is NewBackend with the TLS an https:// backend is spoken
// to with (http:// backends ignore it).
func NewBackendTLS(rawURL string, role Role, dialTimeout time.Duration, t *UpstreamTLS) (*Backend, error) {
	u, err := config.ParseBackendURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%s url: %w", role, err)
	}
	b := &Backend{
		URL:        u.URL,
		Role:       role,
		Host:       bracketIPv6(u.Host),
		key:        u.Key(),
		hostHeader: u.HostHeader,
		up:         newUpstream(u.Addr(), dialTimeout),
	}
	var secure func(net.Conn, time.Time) (net.Conn, error)
	if u.TLS {
		secure = func(c net.Conn, deadline time.Time) (net.Conn, error) { return t.secure(c, u.Host, deadline) }
		b.up.secure = secure
	}
	b.plain = &fasthttp.HostClient{
		Addr:                u.Addr(),
		MaxConns:            64,
		MaxIdleConnDuration: 4 * time.Second,
		// fasthttp refuses an https:// request URI on a client that is not
		// TLS; the handshake is secure's (Dial returns a *tls.Conn, which
		// fasthttp takes as it is).
		IsTLS: u.TLS,
		// Dual-stack: an engine at an IPv6 address, or a name that resolves
		// to one, is dialled (fasthttp's default dialer resolves IPv4 only).
		Dial: func(addr string) (net.Conn, error) {
			if secure == nil {
				return fasthttp.DialDualStackTimeout(addr, dialTimeout)
			}
			deadline := deadlineAfter(dialTimeout)
			c, err := fasthttp.DialDualStackTimeout(addr, dialTimeout)
			if err != nil {
				return nil, err
			}
			if c, err = secure(c, deadline); err != nil {
				return nil, err
			}
			return &refusalConn{Conn: c.(*tls.Conn), refused: &b.refused}, nil
		},
	}
	b.engineLoad.Store(-1)
	return b, nil
}

// bracketIPv6 wraps an IPv6 literal the way SGLang's maybe_wrap_ipv6_address does.
func bracketIPv6(host string) string {
	if strings.IndexByte(host, ':') >= 0 {
		return "[" + host + "]"
	}
	return host
}

// Bootstrap is a prefill's KV rendezvous as pdlb injects and tracks it.
type Bootstrap struct {
	// Host is injected as bootstrap_host: the prefill's own host, or
	// pdlb's advertise host when pdlb serves the registry (IPv6 bracketed,
	// as SGLang's balancers send it).
	Host string
	// Port is the prefill's KV bootstrap port; nil is sent as JSON null.
	Port *int
	// Addr keys the registry directory ("host:port" as decodes dial it);
	// empty for decodes.
	Addr string
	// Listen is the port the registry namespace is served on (Port, or
	// the default when Port is nil).
	Listen int
}

// Bootstrap returns the prefill's rendezvous (zero for a decode).
func (b *Backend) Bootstrap() Bootstrap {
	if p := b.bootstrap.Load(); p != nil {
		return *p
	}
	return Bootstrap{}
}

// SetBootstrap records the prefill's bootstrap port and the registry key
// (advertiseHost empty means the prefill's own host). It reports whether
// they changed.
func (b *Backend) SetBootstrap(port *int, advertiseHost string, defaultPort int) bool {
	host := b.Host
	if advertiseHost != "" {
		host = bracketIPv6(advertiseHost)
	}
	listen := defaultPort
	if port != nil {
		listen = *port
	}
	next := &Bootstrap{Host: host, Port: port, Addr: host + ":" + strconv.Itoa(listen), Listen: listen}
	old := b.bootstrap.Swap(next)
	return old == nil || old.Addr != next.Addr || (old.Port == nil) != (next.Port == nil) ||
		(old.Port != nil && *old.Port != *next.Port)
}

// Key is the URL's normalised form ("http://engine-1:80" for
// "http://Engine-1/"): every spelling of the engine's URL, in every pdlb
// replica, has the same one, so policies that must agree across replicas
// hash it rather than URL.
func (b *Backend) Key() string { return b.key }

// InFlight is the number of requests currently using the backend.
func (b *Backend) InFlight() int64 { return b.inflight.Load() }

// Selected counts how often selection picked the backend.
func (b *Backend) Selected() uint64 { return b.selected.Load() }

// Breaker returns the backend's circuit breaker (nil when breakers are off).
func (b *Backend) Breaker() *Breaker { return b.breaker.Load() }

// Draining reports whether the backend takes no new requests.
func (b *Backend) Draining() bool { return b.draining.Load() }

// Drain stops new requests to the backend; in-flight ones finish.
func (b *Backend) Drain() { b.draining.Store(true) }

// Observed returns what SetObserved stored for b (nil before).
func (b *Backend) Observed() any { return b.observed.Load() }

// SetObserved keeps a LegObserver's state for b; it must store values of
// one type.
func (b *Backend) SetObserved(v any) { b.observed.Store(v) }

// Undrain lets a draining backend take new requests again (the admin API
// puts it back into the pool first).
func (b *Backend) Undrain() { b.draining.Store(false) }

// Healthy reports the active health checks' verdict (true when checks are off).
func (b *Backend) Healthy() bool { return !b.unhealthy.Load() }

// SetHealthy records a health-check verdict.
func (b *Backend) SetHealthy(ok bool) { b.unhealthy.Store(!ok) }

// Close drops the backend's idle connections.
func (b *Backend) Close() {
	b.up.closeIdle()
	b.plain.CloseIdleConnections()
}

// admits reports whether selection may consider the backend now: not
// draining, healthy, breaker not refusing. It is lock-free.
func (b *Backend) admits(now time.Time) bool {
	if b.draining.Load() || b.unhealthy.Load() {
		return false
	}
	br := b.breaker.Load()
	return br == nil || br.mayAllow(now)
}
