package load

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"pdlb/config"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
)

// target is one endpoint under test with its own keep-alive pool.
type target struct {
	base string
	host string // Host header and client address
	uri  string // full URL requested
	// auth is the Authorization value of every request ("": none).
	auth   string
	client *fasthttp.HostClient
}

func newTarget(base, route string, opts Options) (*target, error) {
	u, err := url.Parse(base)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("target %q: want http(s)://host:port", base)
	}
	addr := u.Host
	if _, _, err := net.SplitHostPort(addr); err != nil {
		port := "80"
		if u.Scheme == "https" {
			port = "443"
		}
		addr = net.JoinHostPort(u.Hostname(), port)
	}
	path := strings.TrimRight(u.Path, "/") + route
	var tlsCfg *tls.Config
	if u.Scheme == "https" && opts.CAFile != "" {
		pool, err := config.LoadCAPool("--ca-file", opts.CAFile)
		if err != nil {
			return nil, err
		}
		tlsCfg = &tls.Config{RootCAs: pool}
	}
	auth := ""
	if opts.APIKey != "" {
		auth = "Bearer " + opts.APIKey
	}
	return &target{
		auth: auth,
		base: base,
		host: u.Host,
		uri:  u.Scheme + "://" + u.Host + path,
		client: &fasthttp.HostClient{
			Addr:      addr,
			Name:      "pdlb-bench",
			IsTLS:     u.Scheme == "https",
			TLSConfig: tlsCfg,
			// A target at an IPv6 address ([::1]:8000) or an IPv6-only name.
			DialDualStack: true,
			// Open loop drops arrivals itself at the cap; closed loop never exceeds it.
			// The margin covers connections still closing after a timeout.
			MaxConns:                      opts.Concurrency + opts.Concurrency/4 + 8,
			MaxConnWaitTimeout:            opts.Timeout,
			MaxIdleConnDuration:           time.Minute,
			StreamResponseBody:            opts.Stream,
			NoDefaultUserAgentHeader:      true,
			DisableHeaderNamesNormalizing: true,
			ReadBufferSize:                16 << 10,
			MaxIdemponentCallAttempts:     1,
		},
	}, nil
}

// close drops the target's idle connections so that the next round starts fresh.
func (t *target) close() { t.client.CloseIdleConnections() }
