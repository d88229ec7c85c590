package config

import (
	"net/netip"
	"testing"
)

func TestParseSource(t *testing.T) {
	for _, tt := range []struct {
		in, want string
	}{
		{"10.0.0.5", "10.0.0.5/32"},
		{"10.0.0.0/16", "10.0.0.0/16"},
		{"10.1.2.3/8", "10.0.0.0/8"}, // the length is what the operator wrote
		{"::1", "::1/128"},
		{"fd00::/8", "fd00::/8"},
		{"::ffff:10.0.0.5", "10.0.0.5/32"},
		{"::ffff:10.2.0.0/112", "10.2.0.0/16"},
		{"0.0.0.0/0", "0.0.0.0/0"},
	} {
		got, err := ParseSource(tt.in)
		if err != nil {
			t.Errorf("ParseSource(%q): %v", tt.in, err)
			continue
		}
		if got != netip.MustParsePrefix(tt.want) {
			t.Errorf("ParseSource(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
	for _, bad := range []string{"", "host.example", "10.0.0.0/33", "10.0.0.0/", "10.0.0", " 10.0.0.1", "fe80::1%eth0", "fe80::/10%eth0", "10.0.0.0-10.0.0.9"} {
		if p, err := ParseSource(bad); err == nil {
			t.Errorf("ParseSource(%q) = %s, want an error", bad, p)
		}
	}
}
