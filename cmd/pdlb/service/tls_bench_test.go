package service

import (
	"crypto/tls"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"pdlb/config"
	"pdlb/proxy/proxytest"
)

// BenchmarkServeTLS is one non-streamed /generate through a whole pdlb
// (client → pdlb → prefill and decode engines, all on loopback keep-alive
// connections, one process): "plain" as deployed by default, "client-tls"
// with server.tls on the client listener, "upstream-tls" with both engines
// at https://, "both" with the two. cpu-ns/op is what one request costs
// the client, pdlb and the engines together; the differences are TLS's.
func BenchmarkServeTLS(b *testing.B) {
	for _, bc := range []struct {
		name             string
		client, upstream bool
	}{{"plain", false, false}, {"client-tls", true, false}, {"upstream-tls", false, true}, {"both", true, true}} {
		b.Run(bc.name, func(b *testing.B) { benchmarkServeTLS(b, bc.client, bc.upstream) })
	}
}

func benchmarkServeTLS(b *testing.B, clientTLS, upstreamTLS bool) {
	dir := b.TempDir()
	ca := proxytest.NewCA(b, "bench CA")
	caFile := ca.WriteCA(b, dir, "ca")
	cert := ca.Issue(b, "pdlb", proxytest.CertOptions{})
	answer := proxytest.JSONAnswer(200, `{"text":"ok","meta_info":{}}`)
	engine := func() *proxytest.Engine {
		if upstreamTLS {
			return proxytest.NewTLSEngine(b, cert.ServerConfig(nil), answer)
		}
		return proxytest.NewEngine(b, answer)
	}
	cfg := testConfig()
	cfg.Prefill = []config.Prefill{{URL: engine().URL}}
	cfg.Decode = []config.Decode{{URL: engine().URL}}
	if upstreamTLS {
		cfg.UpstreamTLS.CAFile = caFile
	}
	if clientTLS {
		certFile, keyFile := cert.Write(b, dir, "server")
		cfg.Server.TLS = config.ListenerTLS{CertFile: certFile, KeyFile: keyFile}
	}
	svc, err := New(&cfg, zerolog.Nop())
	if err != nil {
		b.Fatal(err)
	}
	if err := svc.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { svc.Shutdown(b.Context()) })

	scheme := "http://"
	if clientTLS {
		scheme = "https://"
	}
	client := &fasthttp.HostClient{Addr: svc.Addr(), IsTLS: clientTLS, TLSConfig: &tls.Config{RootCAs: ca.Pool()},
		MaxConns: 1, ReadTimeout: 10 * time.Second}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI(scheme + svc.Addr() + "/generate")
	req.Header.SetContentType("application/json")
	req.SetBodyString(`{"text":"hello","sampling_params":{"max_new_tokens":8}}`)
	do := func() {
		if err := client.Do(req, resp); err != nil || resp.StatusCode() != 200 {
			b.Fatalf("%v %d %s", err, resp.StatusCode(), resp.Body())
		}
	}
	do() // every keep-alive connection is open
	b.ReportAllocs()
	stop := proxytest.ReportCPU(b)
	for b.Loop() {
		do()
	}
	stop()
}
