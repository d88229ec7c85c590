package bootstrap

import "github.com/valyala/fasthttp"

// newClient is the HTTP client of everything in this package that calls a
// registry (the poller, the lookups, the registration client). It dials
// IPv6 as well as IPv4: fasthttp's default dialer resolves IPv4 only, so a
// registry at [::1] or behind an IPv6-only name would never be reached.
func newClient() *fasthttp.Client {
	return &fasthttp.Client{NoDefaultUserAgentHeader: true, DialDualStack: true}
}
