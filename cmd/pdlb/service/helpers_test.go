package service

import (
	"context"
	"testing"

	"github.com/rs/zerolog"
	"k8s.io/client-go/kubernetes/fake"

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

func testConfig() config.Config { return proxytest.Config() }

func testLog(t *testing.T) zerolog.Logger { return proxytest.Log(t) }

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
	var opts2 []Option
	if cfg.Discovery.Kubernetes.Enabled { // an API server without a pod
		opts2 = append(opts2, WithKubernetes(fakePods{fake.NewClientset()}))
	}
	svc := startService(t, &cfg, testLog(t), opts2...)
	return &lb{URL: "http://" + svc.Addr(), pool: svc.Pool, svc: svc}
}

// startService builds and starts a Service, shut down when the test ends.
func startService(t *testing.T, cfg *config.Config, log zerolog.Logger, opts ...Option) *Service {
	t.Helper()
	svc, err := New(cfg, log, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Shutdown(context.Background()) })
	return svc
}
