package load

import (
	"context"
	"crypto/tls"
	"net"
	"testing"

	"github.com/valyala/fasthttp"

	"pdlb/proxy/proxytest"
)

// TestHTTPSTargetTrustsCAFile: an https:// target whose certificate a
// test CA signed is measured with --ca-file naming that CA, and fails
// every request without it (the system's pool does not know the CA).
func TestHTTPSTargetTrustsCAFile(t *testing.T) {
	ca := proxytest.NewCA(t, "bench CA")
	caFile := ca.WriteCA(t, t.TempDir(), "ca")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: engine(0), CloseOnShutdown: true}
	go srv.Serve(tls.NewListener(ln, ca.Issue(t, "target", proxytest.CertOptions{}).ServerConfig(nil))) //nolint:errcheck // ends at Shutdown
	t.Cleanup(func() { _ = srv.Shutdown() })
	url := "https://" + ln.Addr().String()

	for _, tc := range []struct {
		caFile            string
		completed, failed int64
	}{{caFile, 20, 0}, {"", 0, 20}} {
		rep, err := Run(context.Background(), Options{Targets: []string{url}, Concurrency: 2, Requests: 20,
			OutputLen: Dist{4, 4}, InputLen: Dist{5, 5}, CAFile: tc.caFile})
		if err != nil {
			t.Fatal(err)
		}
		if r := rep.Targets[0].Rounds[0]; r.Completed != tc.completed || r.Failed != tc.failed {
			t.Errorf("ca file %q: completed %d, failed %d; want %d, %d", tc.caFile, r.Completed, r.Failed, tc.completed, tc.failed)
		}
	}
	if _, err := Run(context.Background(), Options{Targets: []string{url}, Requests: 1, CAFile: caFile + ".missing"}); err == nil {
		t.Error("a missing CA file was not an error")
	}
}

// TestAPIKey: --api-key is sent on every request; without it a target
// that requires it fails every one with its 401.
func TestAPIKey(t *testing.T) {
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Request.Header.Peek("Authorization")) != "Bearer k3y" {
			ctx.SetStatusCode(401)
			return
		}
		engine(0)(ctx)
	}}
	ln := proxytest.Listen(t, "127.0.0.1:0")
	go srv.Serve(ln) //nolint:errcheck // ends at Shutdown
	t.Cleanup(func() { _ = srv.Shutdown() })
	for _, tc := range []struct {
		key               string
		completed, failed int64
	}{{"k3y", 10, 0}, {"", 0, 10}} {
		rep, err := Run(context.Background(), Options{Targets: []string{"http://" + ln.Addr().String()}, Concurrency: 2, Requests: 10,
			OutputLen: Dist{4, 4}, InputLen: Dist{5, 5}, APIKey: tc.key})
		if err != nil {
			t.Fatal(err)
		}
		if r := rep.Targets[0].Rounds[0]; r.Completed != tc.completed || r.Failed != tc.failed || tc.failed > 0 && r.Errors["status_401"] != tc.failed {
			t.Errorf("key %q: completed %d, failed %d (%v); want %d, %d", tc.key, r.Completed, r.Failed, r.Errors, tc.completed, tc.failed)
		}
	}
}
