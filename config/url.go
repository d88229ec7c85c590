package config

import (
	"fmt"
	"net"
	"net/url"
	"strings"
)

// BackendURL is an engine's URL as pdlb uses it everywhere: checked once
// here (config validation, the admin API and the backend pool all call
// ParseBackendURL) so that two spellings of one engine ("http://P:80/" and
// "http://p") are the same backend.
type BackendURL struct {
	// URL is the URL as given, without a trailing slash: what logs, metrics
	// and GET /workers show.
	URL string
	// Host is the host name, lower-cased, IPv6 without brackets ("::1").
	Host string
	// Port is the port, "80" ("443" for https) when the URL has none.
	Port string
	// TLS is set for https:// URLs: pdlb speaks TLS to the engine
	// (upstream_tls).
	TLS bool
	// HostHeader is the URL's host[:port] as given, for the Host header.
	HostHeader string
}

// Addr is "host:port" for dialling (IPv6 bracketed).
func (u BackendURL) Addr() string { return net.JoinHostPort(u.Host, u.Port) }

// Key is the normalised form two spellings of one engine share.
func (u BackendURL) Key() string { return u.scheme() + "://" + u.Addr() }

func (u BackendURL) scheme() string {
	if u.TLS {
		return "https"
	}
	return "http"
}

// ParseBackendURL checks an engine URL: http://host[:port] or
// https://host[:port] with no path, query, fragment or user info (pdlb
// appends the route itself).
func ParseBackendURL(raw string) (BackendURL, error) {
	if raw == "" {
		return BackendURL{}, fmt.Errorf("URL is required (e.g. http://10.0.0.1:30000)")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return BackendURL{}, fmt.Errorf("%q is not a URL", raw)
	}
	var secure bool
	switch strings.ToLower(u.Scheme) {
	case "http":
	case "https":
		secure = true
	default:
		return BackendURL{}, fmt.Errorf("%q must start with http:// or https://", raw)
	}
	if strings.Trim(u.Path, "/") != "" {
		return BackendURL{}, fmt.Errorf("%q must not have a path: pdlb appends the route (/generate, …) to host:port", raw)
	}
	if u.Hostname() == "" {
		return BackendURL{}, fmt.Errorf("%q has no host", raw)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return BackendURL{}, fmt.Errorf("%q must not carry a query, fragment or user info", raw)
	}
	port := u.Port()
	switch {
	case port != "":
	case secure:
		port = "443"
	default:
		port = "80"
	}
	return BackendURL{URL: strings.TrimRight(raw, "/"), Host: strings.ToLower(u.Hostname()), Port: port, HostHeader: u.Host, TLS: secure}, nil
}
