package service

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"pdlb/bootstrap/etcdstore/etcdtest"
	"pdlb/config"
	"pdlb/proxy/proxytest"
)

// sickEngine answers /health 200 until sick is set, then 503.
func sickEngine(t *testing.T) (*proxytest.Engine, *atomic.Bool) {
	var sick atomic.Bool
	e := proxytest.NewEngine(t, func(ctx *fasthttp.RequestCtx) {
		if sick.Load() {
			proxytest.JSONAnswer(503, `{}`)(ctx)
			return
		}
		proxytest.JSONAnswer(200, `{}`)(ctx)
	})
	return e, &sick
}

const oneRank = `{"attn_tp_size":1,"attn_tp_rank":0,"attn_cp_size":1,"attn_cp_rank":0,"attn_dp_size":1,"attn_dp_rank":0,` +
	`"pp_size":1,"pp_rank":0,"system_dp_size":1,"system_dp_rank":0,"rank_ip":"10.0.0.1","rank_port":17000,"page_size":64,"kv_cache_dtype":"auto"}`

// forgetLB is a pdlb whose prefill's namespace is forgotten after 1 s of
// failed health checks.
func forgetLB(t *testing.T, p *proxytest.Engine, listen string, port int, etcd *etcdtest.Etcd) *Service {
	t.Helper()
	cfg := testConfig()
	cfg.Prefill = []config.Prefill{{URL: p.URL, BootstrapPort: &port}}
	cfg.Decode = []config.Decode{{URL: engine(t).URL}}
	cfg.Bootstrap = config.Default().Bootstrap
	cfg.Bootstrap.ListenHost, cfg.Bootstrap.AdvertiseHost, cfg.Bootstrap.ForgetAfter = listen, listen, time.Second
	cfg.Health = config.Health{Interval: 20 * time.Millisecond, Timeout: time.Second, FailThreshold: 1, PassThreshold: 1}
	if etcd != nil {
		cfg.Cluster.Etcd = config.Default().Cluster.Etcd
		cfg.Cluster.Etcd.Endpoints = []string{etcd.Endpoint()}
	}
	return startService(t, &cfg, testLog(t))
}

func registered(s *Service, port int) int {
	n, _ := s.reg.registry.Status("x:" + strconv.Itoa(port))
	return n
}

// One pdlb: a prefill failing its health checks for forget_after loses its
// registration; one that registers again meanwhile keeps it.
func TestForgetAfterOneInstance(t *testing.T) {
	p, sick := sickEngine(t)
	port := proxytest.FreePort(t)
	s := forgetLB(t, p, "127.0.0.1", port, nil)
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	if code, body := send(t, "PUT", base+"/route", oneRank); code != 200 {
		t.Fatalf("PUT: %d %s", code, body)
	}
	sick.Store(true)
	// Registering again during the failures (a prefill restarted in place)
	// keeps the namespace past forget_after.
	time.Sleep(300 * time.Millisecond)
	send(t, "PUT", base+"/route", oneRank)
	time.Sleep(1500 * time.Millisecond)
	if registered(s, port) != 1 {
		t.Fatal("a namespace registered again during the failures was forgotten")
	}
	// A new spell with nothing written: forgotten after 1 s.
	sick.Store(false)
	within(t, 5*time.Second, "healthy again", func() bool { return s.Pool.Find(p.URL).Healthy() })
	sick.Store(true)
	within(t, 5*time.Second, "namespace forgotten", func() bool { return registered(s, port) == 0 })
}

// Replicas: the namespace goes only when every live replica's health
// checks have failed the prefill for forget_after.
func TestForgetAfterNeedsEveryReplica(t *testing.T) {
	etcd := etcdtest.Start(t, "127.0.0.1")
	port := proxytest.FreePort(t)
	// Each replica checks its own engine, so one can fail while the other passes.
	pa, sickA := sickEngine(t)
	pb, sickB := sickEngine(t)
	a := forgetLB(t, pa, "127.0.0.1", port, etcd)
	b := forgetLB(t, pb, "127.0.0.2", port, etcd)
	if code, body := send(t, "PUT", "http://127.0.0.1:"+strconv.Itoa(port)+"/route", oneRank); code != 200 {
		t.Fatalf("PUT: %d %s", code, body)
	}
	within(t, 5*time.Second, "B has the registration", func() bool { return registered(b, port) == 1 })
	sickA.Store(true)
	time.Sleep(2500 * time.Millisecond)
	if registered(a, port) != 1 || registered(b, port) != 1 {
		t.Fatal("forgotten while replica B still reached the prefill")
	}
	sickB.Store(true)
	within(t, 10*time.Second, "forgotten on both", func() bool { return registered(a, port) == 0 && registered(b, port) == 0 })
}
