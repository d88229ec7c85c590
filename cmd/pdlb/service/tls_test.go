package service

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptrace"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"pdlb/config"
	"pdlb/proxy/proxytest"
)

// pki is a test's certificates on disk: a CA, pdlb's server pair, and
// the files' paths.
type pki struct {
	dir              string
	ca               *proxytest.CA
	caFile           string
	server           *proxytest.Cert
	certFile, keyFil string
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{dir: t.TempDir(), ca: proxytest.NewCA(t, "pdlb test CA")}
	p.caFile = p.ca.WriteCA(t, p.dir, "ca")
	p.server = p.ca.Issue(t, "pdlb", proxytest.CertOptions{})
	p.certFile, p.keyFil = p.server.Write(t, p.dir, "server")
	return p
}

// client is an HTTPS client trusting p's CA, presenting certs[0] if
// given, whatever CAs the server says it accepts (Go's client otherwise
// sends none that does not fit, and a certificate from a wrong CA would
// never reach pdlb).
func (p *pki) client(certs ...tls.Certificate) *http.Client {
	cfg := &tls.Config{RootCAs: p.ca.Pool()}
	if len(certs) > 0 {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &certs[0], nil }
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
}

// tlsLB starts a pdlb whose serving listener speaks TLS with p's pair,
// logging JSON into logs.
func tlsLB(t *testing.T, p *pki, logs *proxytest.SyncBuffer, opts ...lbOption) (*Service, string) {
	t.Helper()
	pe := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{"text":""}`))
	de := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{"text":"hi"}`))
	cfg := testConfig()
	cfg.Prefill = []config.Prefill{{URL: pe.URL}}
	cfg.Decode = []config.Decode{{URL: de.URL}}
	cfg.Server.TLS = config.ListenerTLS{CertFile: p.certFile, KeyFile: p.keyFil}
	for _, o := range opts {
		o(&cfg)
	}
	svc := startService(t, &cfg, zerolog.New(logs))
	return svc, "https://" + svc.Addr()
}

func generate(c *http.Client, base string) (*http.Response, error) {
	resp, err := c.Post(base+"/generate", "application/json", strings.NewReader(`{"text":"hello"}`))
	if err == nil {
		io.Copy(io.Discard, resp.Body) // read to the end: the connection is reused
		resp.Body.Close()
	}
	return resp, err
}

// logLine waits for a JSON log line whose message is msg and whose text
// holds every one of want, and returns it.
func logLine(t *testing.T, logs *proxytest.SyncBuffer, msg string, want ...string) string {
	t.Helper()
	var found string
	ok := proxytest.WaitFor(5*time.Second, func() bool {
		for _, line := range bytes.Split(logs.Bytes(), []byte("\n")) {
			var m map[string]any
			if json.Unmarshal(line, &m) != nil || m["message"] != msg {
				continue
			}
			all := true
			for _, w := range want {
				all = all && bytes.Contains(line, []byte(w))
			}
			if all {
				found = string(line)
				return true
			}
		}
		return false
	})
	if !ok {
		t.Fatalf("no log line %q holding %q; the log:\n%s", msg, want, logs.Bytes())
	}
	return found
}

// TestServingListenerTLS: with server.tls set the serving listener speaks
// TLS 1.2+ and HTTP/1.1 only; a request goes through end to end; a plain
// HTTP client is refused with a log line that says why.
func TestServingListenerTLS(t *testing.T) {
	p := newPKI(t)
	logs := &proxytest.SyncBuffer{}
	_, base := tlsLB(t, p, logs)
	resp, err := generate(p.client(), base)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("generate over TLS: %v %v", resp, err)
	}
	if resp.TLS == nil || resp.TLS.Version < tls.VersionTLS12 {
		t.Fatalf("connection state %+v, want TLS 1.2+", resp.TLS)
	}
	// A client offering h2 gets HTTP/1.1.
	c, err := tls.Dial("tcp", strings.TrimPrefix(base, "https://"), &tls.Config{RootCAs: p.ca.Pool(), NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	if proto := c.ConnectionState().NegotiatedProtocol; proto != "http/1.1" {
		t.Errorf("ALPN chose %q, want http/1.1", proto)
	}
	c.Close()
	logLine(t, logs, "pdlb listening", `"tls":true`)

	// TLS 1.1 is refused.
	old := p.client()
	old.Transport.(*http.Transport).TLSClientConfig.MinVersion = tls.VersionTLS10
	old.Transport.(*http.Transport).TLSClientConfig.MaxVersion = tls.VersionTLS11
	if _, err := generate(old, base); err == nil {
		t.Fatal("a TLS 1.1 client was served")
	}
	logLine(t, logs, "TLS handshake failed", "client offered only unsupported versions")

	// Plain HTTP on the TLS port: refused, and logged as a handshake
	// failure (not as a malformed request).
	if resp, err := http.Post("http://"+strings.TrimPrefix(base, "https://")+"/generate", "application/json", strings.NewReader(`{}`)); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("plain HTTP served on the TLS listener")
		}
	}
	logLine(t, logs, "TLS handshake failed", "first record does not look like a TLS handshake", `"listener":"serving"`)
	if bytes.Contains(logs.Bytes(), []byte("refused malformed request")) {
		t.Fatalf("a handshake failure was logged as a malformed request:\n%s", logs.Bytes())
	}
}

// TestClientCertificatesRequired: with server.tls.client_ca_file only
// clients presenting a valid certificate from that CA are served; a
// client without one, with one from another CA, or with an expired one
// fails its handshake, and pdlb's log line says which.
func TestClientCertificatesRequired(t *testing.T) {
	p := newPKI(t)
	logs := &proxytest.SyncBuffer{}
	_, base := tlsLB(t, p, logs, func(c *config.Config) { c.Server.TLS.ClientCAFile = p.caFile })

	good := p.ca.Issue(t, "client", proxytest.CertOptions{Client: true})
	if resp, err := generate(p.client(good.Pair), base); err != nil || resp.StatusCode != 200 {
		t.Fatalf("a client with a valid certificate: %v %v", resp, err)
	}
	other := proxytest.NewCA(t, "another CA").Issue(t, "stranger", proxytest.CertOptions{Client: true})
	expired := p.ca.Issue(t, "late", proxytest.CertOptions{Client: true,
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour)})
	for _, tc := range []struct {
		name  string
		certs []tls.Certificate
		log   string
	}{
		{"no certificate", nil, "client didn't provide a certificate"},
		{"another CA", []tls.Certificate{other.Pair}, "certificate signed by unknown authority"},
		{"expired", []tls.Certificate{expired.Pair}, "certificate has expired or is not yet valid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if resp, err := generate(p.client(tc.certs...), base); err == nil {
				t.Fatalf("served: %d", resp.StatusCode)
			}
			logLine(t, logs, "TLS handshake failed", tc.log, `"level":"warn"`, `"remote":"127.0.0.1:`)
		})
	}
}

// serial dials addr and returns the serial number of the certificate it
// is shown (a new handshake).
func servedSerial(t *testing.T, addr string, p *pki) *big.Int {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: p.ca.Pool()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber
}

// TestCertificateFilesReloadKeepsConnections: a certificate rewritten in
// place (cert-manager) is served to new handshakes within the watch's
// debounce, while a keep-alive connection opened before goes on, with
// its old certificate; a pair that does not fit is refused with a line
// naming the file, and the running certificate stays.
func TestCertificateFilesReloadKeepsConnections(t *testing.T) {
	p := newPKI(t)
	logs := &proxytest.SyncBuffer{}
	svc, base := tlsLB(t, p, logs)
	client := p.client()
	first := p.server.Leaf.SerialNumber
	if resp, err := generate(client, base); err != nil || resp.TLS.PeerCertificates[0].SerialNumber.Cmp(first) != 0 {
		t.Fatalf("first request: %v %v", resp, err)
	}

	next := p.ca.Issue(t, "pdlb renewed", proxytest.CertOptions{})
	next.Write(t, p.dir, "server")
	if !proxytest.WaitFor(5*time.Second, func() bool { return servedSerial(t, svc.Addr(), p).Cmp(next.Leaf.SerialNumber) == 0 }) {
		t.Fatalf("the rewritten certificate is not served; log:\n%s", logs.Bytes())
	}
	logLine(t, logs, "TLS certificate loaded", "pdlb renewed", `"listener":"serving"`)

	// The connection opened before the change is reused, as it was.
	var reused bool
	req, _ := http.NewRequest(http.MethodPost, base+"/generate", strings.NewReader(`{"text":"again"}`))
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }}))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if !reused || resp.StatusCode != 200 || resp.TLS.PeerCertificates[0].SerialNumber.Cmp(first) != 0 {
		t.Fatalf("after the reload the old connection: reused %v, status %d; want it reused with the first certificate", reused, resp.StatusCode)
	}

	// A key that is not the certificate's: refused, the renewed pair stays.
	stranger := p.ca.Issue(t, "stranger", proxytest.CertOptions{})
	proxytest.WriteFile(t, p.keyFil, stranger.KeyPEM)
	logLine(t, logs, "TLS files changed but do not load; keeping the running certificate", "server.tls.key_file", filepath.Base(p.keyFil), "does not match")
	if got := servedSerial(t, svc.Addr(), p); got.Cmp(next.Leaf.SerialNumber) != 0 {
		t.Fatalf("served serial %v after a bad pair, want the running %v", got, next.Leaf.SerialNumber)
	}
}

// TestReloadSwapsCertificates: a reload (SIGHUP, or a change to the
// config file) reads the files again, also at new paths; a reload naming
// a pair that does not fit is rejected whole and the running pair stays.
func TestReloadSwapsCertificates(t *testing.T) {
	p := newPKI(t)
	logs := &proxytest.SyncBuffer{}
	svc, _ := tlsLB(t, p, logs)

	dir := t.TempDir()
	renewed := p.ca.Issue(t, "pdlb at new paths", proxytest.CertOptions{})
	cert, key := renewed.Write(t, dir, "tls")
	next := *svc.Config()
	next.Server.TLS = config.ListenerTLS{CertFile: cert, KeyFile: key}
	if err := svc.Apply(&next); err != nil {
		t.Fatal(err)
	}
	if got := servedSerial(t, svc.Addr(), p); got.Cmp(renewed.Leaf.SerialNumber) != 0 {
		t.Fatalf("after the reload the served serial is %v, want the new pair's", got)
	}

	bad := next
	bad.Server.TLS.KeyFile = p.keyFil // another certificate's key
	err := svc.Apply(&bad)
	if err == nil || !strings.Contains(err.Error(), "server.tls.key_file") || !strings.Contains(err.Error(), p.keyFil) {
		t.Fatalf("a reload with a mismatched pair: %v, want an error naming server.tls.key_file and its file", err)
	}
	if got := servedSerial(t, svc.Addr(), p); got.Cmp(renewed.Leaf.SerialNumber) != 0 {
		t.Fatal("a rejected reload changed the certificate")
	}
	if svc.Config().Server.TLS.KeyFile != key {
		t.Fatal("a rejected reload changed the configuration in force")
	}

	// The watch follows the new paths.
	again := p.ca.Issue(t, "pdlb rewritten at new paths", proxytest.CertOptions{})
	again.Write(t, dir, "tls")
	if !proxytest.WaitFor(5*time.Second, func() bool { return servedSerial(t, svc.Addr(), p).Cmp(again.Leaf.SerialNumber) == 0 }) {
		t.Fatal("the certificate rewritten at its new path is not served")
	}

	// Turning TLS off takes a restart; the reload says so.
	off := *svc.Config()
	off.Server.TLS = config.ListenerTLS{}
	if err := svc.Apply(&off); err != nil {
		t.Fatal(err)
	}
	logLine(t, logs, "reload: these keys are read at start only; they keep their running values until a restart", `"server.tls"`)
	servedSerial(t, svc.Addr(), p) // still TLS
}

// TestAdminListenerTLS: admin.tls serves the admin API over TLS, with
// client certificates when admin.tls.client_ca_file is set.
func TestAdminListenerTLS(t *testing.T) {
	p := newPKI(t)
	logs := &proxytest.SyncBuffer{}
	port := proxytest.FreePort(t)
	tlsLB(t, p, logs, func(c *config.Config) {
		c.Server.TLS = config.ListenerTLS{}
		c.Admin = config.Admin{Host: "127.0.0.1", Port: port, TLS: config.ListenerTLS{CertFile: p.certFile, KeyFile: p.keyFil, ClientCAFile: p.caFile}}
	})
	admin := "https://127.0.0.1:" + strconv.Itoa(port)
	op := p.ca.Issue(t, "operator", proxytest.CertOptions{Client: true})
	resp, err := p.client(op.Pair).Get(admin + "/workers")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /workers over mTLS: %v %v", resp, err)
	}
	resp.Body.Close()
	if _, err := p.client().Get(admin + "/workers"); err == nil {
		t.Fatal("admin served a client without a certificate")
	}
	logLine(t, logs, "TLS handshake failed", `"listener":"admin"`, "client didn't provide a certificate")
	// A TCP probe that says nothing: logged at debug, not warn.
	c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	logLine(t, logs, "TLS handshake failed", `"listener":"admin"`, `"level":"debug"`, `"error":"EOF"`)
}

// TestTLSClientLeavingFreesBothLegs: a client of the TLS listener that
// vanishes (its TCP connection closed, as when its process dies) while
// both engines work on its request is noticed by the proxy's watch, which
// peeks at the socket under the TLS connection, and both legs are cut.
func TestTLSClientLeavingFreesBothLegs(t *testing.T) {
	p := newPKI(t)
	// Engines waiting for KV: each returns when pdlb closes its leg.
	hang := func(ctx *fasthttp.RequestCtx) {
		ctx.Conn().SetReadDeadline(time.Now().Add(10 * time.Second))
		var b [1]byte
		ctx.Conn().Read(b[:])
	}
	pe, de := proxytest.NewEngine(t, hang), proxytest.NewEngine(t, hang)
	cfg := testConfig()
	cfg.Prefill = []config.Prefill{{URL: pe.URL}}
	cfg.Decode = []config.Decode{{URL: de.URL}}
	cfg.Server.TLS = config.ListenerTLS{CertFile: p.certFile, KeyFile: p.keyFil}
	svc := startService(t, &cfg, testLog(t))

	c, err := tls.Dial("tcp", svc.Addr(), &tls.Config{RootCAs: p.ca.Pool()})
	if err != nil {
		t.Fatal(err)
	}
	body := `{"text":"hi"}`
	c.Write([]byte("POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body))
	if !proxytest.WaitFor(5*time.Second, func() bool { return pe.Count() > 0 && de.Count() > 0 }) {
		t.Fatal("the request never reached both engines")
	}
	c.NetConn().Close() // gone without a close_notify
	if !pe.WaitClosed(5*time.Second) || !de.WaitClosed(5*time.Second) {
		t.Fatal("the legs were not cut after the TLS client vanished")
	}
}

// TestReloadRereadsSameFiles is what SIGHUP does when the files changed
// but the config did not: a reload of the same config reads the
// listener's pair and upstream_tls's CA again. The file watch is stopped
// first, so only the reload can have read them.
func TestReloadRereadsSameFiles(t *testing.T) {
	p := newPKI(t)
	engineCA := proxytest.NewCA(t, "engines CA")
	upCA := filepath.Join(p.dir, "upstream-ca.crt")
	proxytest.WriteFile(t, upCA, p.ca.PEM) // not the engines' CA yet
	de := proxytest.NewTLSEngine(t, engineCA.Issue(t, "engine", proxytest.CertOptions{}).ServerConfig(nil), proxytest.JSONAnswer(200, `{"text":"hi"}`))
	logs := &proxytest.SyncBuffer{}
	svc, base := tlsLB(t, p, logs, func(c *config.Config) {
		c.Decode = []config.Decode{{URL: de.URL}}
		c.UpstreamTLS.CAFile = upCA
	})
	svc.tls.close()

	if resp, err := generate(p.client(), base); err != nil || resp.StatusCode != 502 {
		t.Fatalf("an engine whose CA is not trusted yet: %v %v", resp, err)
	}
	renewed := p.ca.Issue(t, "pdlb renewed", proxytest.CertOptions{})
	renewed.Write(t, p.dir, "server")
	proxytest.WriteFile(t, upCA, engineCA.PEM)
	if got := servedSerial(t, svc.Addr(), p); got.Cmp(p.server.Leaf.SerialNumber) != 0 {
		t.Fatal("the files were read again without a reload")
	}

	same := *svc.Config()
	if err := svc.Apply(&same); err != nil {
		t.Fatal(err)
	}
	if got := servedSerial(t, svc.Addr(), p); got.Cmp(renewed.Leaf.SerialNumber) != 0 {
		t.Fatal("a reload of the same config did not read the rewritten pair")
	}
	if resp, err := generate(p.client(), base); err != nil || resp.StatusCode != 200 {
		t.Fatalf("a reload of the same config did not read the rewritten upstream CA: %v %v", resp, err)
	}
}
