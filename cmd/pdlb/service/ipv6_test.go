package service

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"

	"pdlb"
	"pdlb/bootstrap"
	"pdlb/config"
	"pdlb/proxy/proxytest"
)

// TestIPv6Prefill: a prefill (and a decode) at [::1] is health-checked,
// gated on its registry and served, in external and embedded mode. pdlb
// dialled IPv4 only, so such a prefill never became ready and every
// request got 503.
func TestIPv6Prefill(t *testing.T) {
	for _, mode := range []string{"external", "embedded"} {
		t.Run(mode, func(t *testing.T) {
			prefill := proxytest.NewEngineOn(t, proxytest.ListenIPv6(t), proxytest.JSONAnswer(200, `{}`))
			decode := proxytest.NewEngineOn(t, proxytest.ListenIPv6(t), proxytest.JSONAnswer(200, `{"text":"ok"}`))
			bootLn := proxytest.ListenIPv6(t)
			bootPort := bootLn.Addr().(*net.TCPAddr).Port
			cfg := testConfig()
			cfg.Health = config.Health{Interval: 20 * time.Millisecond, Timeout: time.Second, FailThreshold: 1, PassThreshold: 1}
			cfg.Bootstrap = config.Default().Bootstrap
			cfg.Bootstrap.Mode, cfg.Bootstrap.PollInterval = mode, 20*time.Millisecond
			cfg.Prefill = []config.Prefill{{URL: prefill.URL, BootstrapPort: &bootPort}}
			cfg.Decode = []config.Decode{{URL: decode.URL}}
			if mode == "external" {
				// The prefill's own registry, as a stock SGLang prefill runs it.
				reg := bootstrap.NewRegistry(cfg.Bootstrap, zerolog.Nop(), pdlb.SystemClock())
				srv := reg.NewServer(bootPort)
				go srv.Serve(bootLn)
				t.Cleanup(func() { srv.Shutdown(context.Background()) })
			} else {
				bootLn.Close() // pdlb listens there
				cfg.Bootstrap.ListenHost, cfg.Bootstrap.AdvertiseHost = "::1", "::1"
			}
			l := &lb{svc: startService(t, &cfg, testLog(t))}
			l.URL = "http://" + l.svc.Addr()
			register := bootstrap.NewRegistrar(bootstrap.RegistrarOptions{URL: "http://[::1]:" + strconv.Itoa(bootPort), Attempts: 1, FailFast: true})
			if err := register.Register(context.Background(), bootstrap.RankRegistration{AttnTPSize: 1, AttnCPSize: 1, AttnDPSize: 1,
				PPSize: 1, SystemDPSize: 1, RankIP: "::1", RankPort: 17000, PageSize: new(64)}); err != nil {
				t.Fatal(err)
			}
			if !proxytest.WaitFor(5*time.Second, func() bool {
				resp, _ := proxytest.Get(t, l.URL+"/readiness")
				return resp.StatusCode == 200
			}) {
				_, body := proxytest.Get(t, l.URL+"/readiness")
				t.Fatalf("never ready: %s", body)
			}
			resp, body := proxytest.Post(t, l.URL+"/generate", `{"text":"hi"}`)
			if resp.StatusCode != 200 || body != `{"text":"ok"}` {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			if h := gjson.GetBytes(decode.LastBodyTo("/generate"), "bootstrap_host").String(); h != "[::1]" {
				t.Fatalf("bootstrap_host %q, want [::1]", h)
			}
		})
	}
}
