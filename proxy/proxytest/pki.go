package proxytest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority made for one test: it issues server and
// client certificates with the validity and names the test chooses, so
// handshakes in tests are real ones (nothing is skipped or mocked).
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// PEM is the CA certificate, for a ca_file or client_ca_file.
	PEM []byte
}

// Cert is an issued certificate and its key.
type Cert struct {
	Leaf    *x509.Certificate
	CertPEM []byte
	KeyPEM  []byte
	// Pair is what a tls.Config takes.
	Pair tls.Certificate
}

// CertOptions choose what Issue puts in a certificate. The zero value is a
// server certificate for 127.0.0.1, ::1 and localhost, valid from an hour
// ago for a day.
type CertOptions struct {
	// NotBefore and NotAfter bound validity; zero: now-1h and now+24h.
	NotBefore, NotAfter time.Time
	// DNS and IPs are the SANs; both empty: localhost, 127.0.0.1, ::1.
	DNS []string
	IPs []net.IP
	// Client makes a client certificate (ExtKeyUsageClientAuth).
	Client bool
}

// NewCA makes a self-signed ECDSA P-256 CA named name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{Cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Pool is a pool holding only this CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Issue signs a certificate named name with the options chosen.
func (ca *CA) Issue(t testing.TB, name string, o CertOptions) *Cert {
	t.Helper()
	if o.NotBefore.IsZero() {
		o.NotBefore = time.Now().Add(-time.Hour)
	}
	if o.NotAfter.IsZero() {
		o.NotAfter = time.Now().Add(24 * time.Hour)
	}
	if len(o.DNS) == 0 && len(o.IPs) == 0 {
		o.DNS, o.IPs = []string{"localhost"}, []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	}
	usage := x509.ExtKeyUsageServerAuth
	if o.Client {
		usage = x509.ExtKeyUsageClientAuth
	}
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    o.NotBefore,
		NotAfter:     o.NotAfter,
		DNSNames:     o.DNS,
		IPAddresses:  o.IPs,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	c := &Cert{
		Leaf:    leaf,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}
	if c.Pair, err = tls.X509KeyPair(c.CertPEM, c.KeyPEM); err != nil {
		t.Fatal(err)
	}
	return c
}

// ServerConfig is a server's TLS config presenting c; with clients set,
// every client must present a certificate that CA signed (mTLS).
func (c *Cert) ServerConfig(clients *CA) *tls.Config {
	cfg := &tls.Config{Certificates: []tls.Certificate{c.Pair}, MinVersion: tls.VersionTLS12}
	if clients != nil {
		cfg.ClientCAs, cfg.ClientAuth = clients.Pool(), tls.RequireAndVerifyClientCert
	}
	return cfg
}

// Write puts the certificate and key into dir as name.crt and name.key
// (replacing them, as an in-place rewrite does) and returns their paths.
func (c *Cert) Write(t testing.TB, dir, name string) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	WriteFile(t, certFile, c.CertPEM)
	WriteFile(t, keyFile, c.KeyPEM)
	return certFile, keyFile
}

// WriteCA puts the CA certificate into dir as name.crt and returns its path.
func (ca *CA) WriteCA(t testing.TB, dir, name string) string {
	t.Helper()
	f := filepath.Join(dir, name+".crt")
	WriteFile(t, f, ca.PEM)
	return f
}

// WriteFile writes data to path, failing the test on error.
func WriteFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}
