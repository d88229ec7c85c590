package router

import (
	"context"
	"testing"

	"github.com/rs/zerolog"

	"pdlb"
	"pdlb/config"
	"pdlb/proxy"
	"pdlb/proxy/proxytest"
)

// lb is a Router on a real loopback listener, in front of real engines.
// It is built from its parts as cmd/pdlb/service builds it (backends with
// breakers, the pool, metrics), without the registry, health checks or
// the admin API: their tests are the service package's.
type lb struct {
	URL    string
	router *Router
	pool   *proxy.Pool
}

type lbOption func(*config.Config)

func testConfig() config.Config { return proxytest.Config() }

func testLog(t *testing.T) zerolog.Logger { return proxytest.Log(t) }

func startLB(t *testing.T, prefills, decodes []*proxytest.Engine, opts ...lbOption) *lb {
	t.Helper()
	return startLBWithLog(t, prefills, decodes, testLog(t), opts...)
}

func startLBWithLog(t *testing.T, prefills, decodes []*proxytest.Engine, log zerolog.Logger, opts ...lbOption) *lb {
	t.Helper()
	return startLBWith(t, prefills, decodes, log, pdlb.Clock{}, opts...)
}

// startLBWith is startLB with a log destination and a clock of the test's.
func startLBWith(t *testing.T, prefills, decodes []*proxytest.Engine, log zerolog.Logger, clock pdlb.Clock, opts ...lbOption) *lb {
	t.Helper()
	return startLBFull(t, prefills, decodes, Options{Log: log, Clock: clock}, opts...)
}

// startLBFull is startLB with the Router's options of the test's (log,
// clock, tracer); the rest of them are built here.
func startLBFull(t testing.TB, prefills, decodes []*proxytest.Engine, o Options, opts ...lbOption) *lb {
	t.Helper()
	log := o.Log
	cfg := testConfig()
	for _, p := range prefills {
		cfg.Prefill = append(cfg.Prefill, config.Prefill{URL: p.URL})
	}
	for _, d := range decodes {
		cfg.Decode = append(cfg.Decode, config.Decode{URL: d.URL})
	}
	for _, o := range opts {
		o(&cfg)
	}
	pool := proxy.NewPool(nil)
	metrics := NewMetrics(pool)
	add := func(url string, role proxy.Role, bootstrapPort *int) {
		b, err := proxy.NewBackend(url, role, cfg.Timeouts.Connect)
		if err != nil {
			t.Fatal(err)
		}
		if role == proxy.Prefill {
			port := 8998 // unless the test's config gives the prefill its own
			if bootstrapPort != nil {
				port = *bootstrapPort
			}
			b.SetBootstrap(&port, "", config.DefaultBootstrapPort)
		}
		if cfg.Breaker.Enabled {
			b.SetBreaker(proxy.NewBreaker(role.String()+" "+url, cfg.Breaker, log, metrics.BreakerChange))
		}
		pool.Add(b)
		t.Cleanup(b.Close)
	}
	for _, p := range cfg.Prefill {
		add(p.URL, proxy.Prefill, p.BootstrapPort)
	}
	for _, d := range cfg.Decode {
		add(d.URL, proxy.Decode, nil)
	}
	o.Settings, o.Pool, o.Metrics = SettingsFrom(&cfg), pool, metrics
	r := New(o)
	if cfg.Metrics.Enabled {
		r.Handle("GET", "/metrics", metrics.Handler)
	}
	ln := proxytest.Listen(t, "127.0.0.1:0")
	go r.Serve(ln)
	t.Cleanup(func() { r.Shutdown(context.Background()) })
	return &lb{URL: "http://" + ln.Addr().String(), router: r, pool: pool}
}
