package config_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"pdlb/config"
	"pdlb/proxy/proxytest"
)

// TestValidateTLS: every mistake in the TLS keys is a config error naming
// the key at fault (exit 2 at start, a rejected reload later), and the
// files named are read, so a key that does not fit its certificate is
// found before pdlb serves with it.
func TestValidateTLS(t *testing.T) {
	dir := t.TempDir()
	ca := proxytest.NewCA(t, "test CA")
	caFile := ca.WriteCA(t, dir, "ca")
	cert, key := ca.Issue(t, "pdlb", proxytest.CertOptions{}).Write(t, dir, "server")
	_, otherKey := ca.Issue(t, "other", proxytest.CertOptions{}).Write(t, dir, "other")
	missing := filepath.Join(dir, "missing.pem")
	garbage := filepath.Join(dir, "garbage.pem")
	proxytest.WriteFile(t, garbage, []byte("not PEM at all\n"))

	tests := []struct {
		name    string
		mutate  func(c *config.Config)
		wantKey string
		wantMsg string
	}{
		{"valid listener", func(c *config.Config) {
			c.Server.TLS = config.ListenerTLS{CertFile: cert, KeyFile: key, ClientCAFile: caFile}
		}, "", ""},
		{"valid upstream", func(c *config.Config) {
			c.UpstreamTLS = config.UpstreamTLS{CAFile: caFile, CertFile: cert, KeyFile: key}
		}, "", ""},
		{"cert without key", func(c *config.Config) { c.Server.TLS.CertFile = cert }, "server.tls.key_file", "required with server.tls.cert_file"},
		{"key without cert", func(c *config.Config) { c.Server.TLS.KeyFile = key }, "server.tls.cert_file", "required with server.tls.key_file"},
		{"client CA without cert", func(c *config.Config) { c.Server.TLS.ClientCAFile = caFile }, "server.tls.client_ca_file", "needs server.tls.cert_file"},
		{"unreadable cert", func(c *config.Config) {
			c.Server.TLS = config.ListenerTLS{CertFile: missing, KeyFile: key}
		}, "server.tls.cert_file", "missing.pem: no such file"},
		{"cert not PEM", func(c *config.Config) {
			c.Server.TLS = config.ListenerTLS{CertFile: garbage, KeyFile: key}
		}, "server.tls.cert_file", "garbage.pem: no PEM CERTIFICATE block"},
		{"key given as cert", func(c *config.Config) {
			c.Server.TLS = config.ListenerTLS{CertFile: key, KeyFile: key}
		}, "server.tls.cert_file", "no PEM CERTIFICATE block"},
		{"unreadable key", func(c *config.Config) {
			c.Server.TLS = config.ListenerTLS{CertFile: cert, KeyFile: missing}
		}, "server.tls.key_file", "no such file"},
		{"key of another cert", func(c *config.Config) {
			c.Server.TLS = config.ListenerTLS{CertFile: cert, KeyFile: otherKey}
		}, "server.tls.key_file", "other.key is not the key of server.tls.cert_file " + cert + ": tls: private key does not match public key"},
		{"unreadable client CA", func(c *config.Config) {
			c.Server.TLS = config.ListenerTLS{CertFile: cert, KeyFile: key, ClientCAFile: missing}
		}, "server.tls.client_ca_file", "no such file"},
		{"admin key mismatch", func(c *config.Config) {
			c.Admin.TLS = config.ListenerTLS{CertFile: cert, KeyFile: otherKey}
		}, "admin.tls.key_file", "does not match"},
		{"admin off: its tls keys unread", func(c *config.Config) {
			c.Admin.Port = 0
			c.Admin.TLS = config.ListenerTLS{CertFile: missing, KeyFile: missing}
		}, "", ""},
		{"upstream CA not PEM", func(c *config.Config) { c.UpstreamTLS.CAFile = garbage }, "upstream_tls.ca_file", "no PEM CERTIFICATE block"},
		{"upstream cert without key", func(c *config.Config) { c.UpstreamTLS.CertFile = cert }, "upstream_tls.key_file", "required with upstream_tls.cert_file"},
		{"upstream key without cert", func(c *config.Config) { c.UpstreamTLS.KeyFile = key }, "upstream_tls.cert_file", "required with upstream_tls.key_file"},
		{"upstream CA unreadable", func(c *config.Config) { c.UpstreamTLS.CAFile = missing }, "upstream_tls.ca_file", "missing.pem: no such file"},
		{"upstream client cert not PEM", func(c *config.Config) {
			c.UpstreamTLS = config.UpstreamTLS{CertFile: garbage, KeyFile: key}
		}, "upstream_tls.cert_file", "no PEM CERTIFICATE block"},
		{"upstream key mismatch", func(c *config.Config) {
			c.UpstreamTLS = config.UpstreamTLS{CertFile: cert, KeyFile: otherKey}
		}, "upstream_tls.key_file", "does not match"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := config.Default()
			c.Prefill = []config.Prefill{{URL: "http://p:30000"}}
			c.Decode = []config.Decode{{URL: "http://d:30001"}}
			tc.mutate(&c)
			err := c.Validate()
			if tc.wantKey == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			var ce *config.Error
			if !errors.As(err, &ce) {
				t.Fatalf("Validate = %v, want a *config.Error", err)
			}
			if ce.Key != tc.wantKey || !strings.Contains(ce.Error(), tc.wantMsg) {
				t.Errorf("Validate = %q (key %s), want key %s and %q", ce.Error(), ce.Key, tc.wantKey, tc.wantMsg)
			}
		})
	}
}
