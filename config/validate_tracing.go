package config

import (
	"fmt"
	"math"
	"net/url"
	"sort"
	"strings"
)

// checkTracing checks the tracing keys whether or not tracing is on, so a
// mistake is found when the file is written, not when tracing is turned on.
func (c *Config) checkTracing() *Error {
	t := c.Tracing
	if t.Endpoint != "" {
		if err := checkCollectorURL(t.Endpoint); err != "" {
			return errorf("tracing.endpoint", err)
		}
	}
	if r := t.SampleRatio; math.IsNaN(r) || r < 0 || r > 1 {
		return errorf("tracing.sample_ratio", fmt.Sprintf("%v out of range 0..1", r))
	}
	if strings.TrimSpace(t.ServiceName) == "" {
		return errorf("tracing.service_name", "must not be empty")
	}
	names := make([]string, 0, len(t.Headers))
	for name := range t.Headers {
		names = append(names, name)
	}
	sort.Strings(names) // the first bad header is the same every time
	for _, name := range names {
		if !isToken(name) {
			return errorf("tracing.headers", fmt.Sprintf("%q is not a header name", name))
		}
		if strings.ContainsAny(t.Headers[name], "\r\n\x00") {
			return errorf("tracing.headers."+name, "value holds a line break or NUL")
		}
	}
	return nil
}

// checkCollectorURL describes what is wrong with an OTLP/HTTP base URL, or
// returns "".
func checkCollectorURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Sprintf("%q is not a URL", raw)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Sprintf("%q must start with http:// or https:// (the collector's OTLP/HTTP address, e.g. http://collector:4318)", raw)
	}
	if u.Host == "" || u.Hostname() == "" {
		return fmt.Sprintf("%q has no host", raw)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return fmt.Sprintf("%q must not have a query or fragment", raw)
	}
	return ""
}
