package config

import "testing"

// TestParseBackendURL: http:// and https:// engines, their default ports,
// and the key two spellings of one engine share; the scheme is part of
// it, so http://e and https://e are two backends.
func TestParseBackendURL(t *testing.T) {
	for _, tc := range []struct {
		raw, key, hostHeader string
		tls                  bool
	}{
		{"http://Engine-1", "http://engine-1:80", "Engine-1", false},
		{"http://10.0.0.1:30000/", "http://10.0.0.1:30000", "10.0.0.1:30000", false},
		{"https://engine-1", "https://engine-1:443", "engine-1", true},
		{"HTTPS://Engine-1:30000/", "https://engine-1:30000", "Engine-1:30000", true},
		{"https://[::1]:30000", "https://[::1]:30000", "[::1]:30000", true},
	} {
		u, err := ParseBackendURL(tc.raw)
		if err != nil {
			t.Errorf("%s: %v", tc.raw, err)
			continue
		}
		if u.Key() != tc.key || u.TLS != tc.tls || u.HostHeader != tc.hostHeader {
			t.Errorf("%s: key %q TLS %v host header %q, want %q %v %q", tc.raw, u.Key(), u.TLS, u.HostHeader, tc.key, tc.tls, tc.hostHeader)
		}
	}
}
