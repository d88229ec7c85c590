package proxy

import (
	"crypto/tls"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"pdlb/config"
	"pdlb/proxy/proxytest"
)

// TestUpstreamTLSResumesSessions: a new connection to an https:// engine
// (its keep-alive ran out, a leg was cut) resumes the TLS session of an
// earlier one, so it costs no certificate signature or check; settings
// put in force by a reload start a session cache of their own.
func TestUpstreamTLSResumesSessions(t *testing.T) {
	ca := proxytest.NewCA(t, "engines CA")
	e := proxytest.NewTLSEngine(t, ca.Issue(t, "engine", proxytest.CertOptions{}).ServerConfig(nil), proxytest.JSONAnswer(200, `{}`))
	up, err := NewUpstreamTLS(config.UpstreamTLS{CAFile: ca.WriteCA(t, t.TempDir(), "ca")})
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewBackendTLS(e.URL, Decode, 0, up)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)

	// roundTrip sends one request on a fresh connection, reads the answer
	// (a TLS 1.3 client takes the session ticket then) and reports whether
	// the handshake resumed.
	roundTrip := func() bool {
		t.Helper()
		c, err := b.up.dial(time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte("GET /health HTTP/1.1\r\nHost: e\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		var h fasthttp.ResponseHeader
		if err := c.readHead(&h); err != nil || h.StatusCode() != 200 {
			t.Fatalf("answer %d: %v", h.StatusCode(), err)
		}
		return c.Conn.(*tls.Conn).ConnectionState().DidResume
	}
	if roundTrip() {
		t.Fatal("the first connection resumed a session")
	}
	if !roundTrip() {
		t.Fatal("the second connection did not resume the first one's session")
	}
	next, err := UpstreamTLSConfig(config.UpstreamTLS{CAFile: ca.WriteCA(t, t.TempDir(), "ca")})
	if err != nil {
		t.Fatal(err)
	}
	up.Set(next)
	if roundTrip() {
		t.Fatal("a connection under reloaded settings resumed a session verified under the old ones")
	}
}
