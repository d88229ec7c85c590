package service

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"pdlb/config"
	"pdlb/proxy"
	"pdlb/proxy/proxytest"
)

// lb is a whole pdlb (a Service) on real loopback listeners.
type lb struct {
	URL  string
	pool *proxy.Pool
	svc  *Service
}

type lbOption func(*config.Config)

func testConfig() config.Config {
	c := config.Config{}
	c.Server = config.Server{Host: "127.0.0.1", Port: 0, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, IdleTimeout: 10 * time.Second, MaxHeaderBytes: 8192}
	c.Timeouts = config.Timeouts{Connect: time.Second, PrefillFirstByte: 5 * time.Second, DecodeFirstByte: 5 * time.Second, DecodeIdle: 5 * time.Second, Request: 10 * time.Second}
	c.Limits = config.Limits{MaxBodyBytes: 1 << 20}
	c.Retry = config.Retry{MaxAttempts: 1, Initial: time.Millisecond, Max: 10 * time.Millisecond}
	c.Bootstrap.Mode = "off"
	c.Metrics.Enabled = true
	return c
}

func testLog(t *testing.T) zerolog.Logger {
	if testing.Verbose() {
		return zerolog.New(zerolog.NewTestWriter(t))
	}
	return zerolog.New(io.Discard)
}

// startLB runs a Service in front of the engines, with the config opts
// change from testConfig.
func startLB(t *testing.T, prefills, decodes []*proxytest.Engine, opts ...lbOption) *lb {
	t.Helper()
	cfg := testConfig()
	port := 8998
	for _, p := range prefills {
		cfg.Prefill = append(cfg.Prefill, config.Prefill{URL: p.URL, BootstrapPort: &port})
	}
	for _, d := range decodes {
		cfg.Decode = append(cfg.Decode, config.Decode{URL: d.URL})
	}
	for _, o := range opts {
		o(&cfg)
	}
	svc := startService(t, &cfg, testLog(t))
	return &lb{URL: "http://" + svc.Addr(), pool: svc.Pool, svc: svc}
}

// startService builds and starts a Service, shut down when the test ends.
func startService(t *testing.T, cfg *config.Config, log zerolog.Logger) *Service {
	t.Helper()
	svc, err := New(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Shutdown(context.Background()) })
	return svc
}
