package service

import (
	"context"
	"testing"

	"pdlb/config"
	"pdlb/proxy/proxytest"
)

// TestShutdownRightAfterStart: a Shutdown that comes before the serving
// goroutines have run still stops both listeners; fasthttp closes only the
// listeners its Serve has taken, so a late Serve would otherwise accept for
// ever (TestMain's leak check names its goroutine).
func TestShutdownRightAfterStart(t *testing.T) {
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	d := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	for range 20 {
		cfg := testConfig()
		cfg.Prefill = []config.Prefill{{URL: p.URL}}
		cfg.Decode = []config.Decode{{URL: d.URL}}
		cfg.Admin = config.Admin{Host: "127.0.0.1", Port: proxytest.FreePort(t)}
		svc, err := New(&cfg, testLog(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := svc.Start(); err != nil {
			t.Fatal(err)
		}
		if err := svc.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}
