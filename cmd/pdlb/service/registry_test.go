package service

import (
	"net"
	"strconv"
	"testing"
	"time"

	"pdlb/config"
	"pdlb/proxy"
	"pdlb/proxy/proxytest"
)

// TestDrainedPrefillRetiresItsRegistryListener: in embedded mode a prefill
// removed at runtime gives its bootstrap port back once it is drained.
func TestDrainedPrefillRetiresItsRegistryListener(t *testing.T) {
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	d := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	port := proxytest.FreePort(t)
	l := startLB(t, nil, []*proxytest.Engine{d}, func(c *config.Config) {
		c.Bootstrap = config.Bootstrap{Mode: "embedded", AdvertiseHost: "127.0.0.1", ListenHost: "127.0.0.1", InfoWait: time.Second}
		c.Prefill = []config.Prefill{{URL: p.URL, BootstrapPort: &port}}
	})
	addr := "127.0.0.1:" + strconv.Itoa(port)
	if c, err := net.Dial("tcp", addr); err != nil {
		t.Fatalf("registry not listening on %s: %v", addr, err)
	} else {
		c.Close()
	}
	b := l.pool.Backends(proxy.Prefill)[0]
	if !l.svc.admin.Drain(b) {
		t.Fatal("drain refused")
	}
	if !proxytest.WaitFor(3*time.Second, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err != nil
	}) {
		t.Fatal("the drained prefill's registry still listens")
	}
}

// TestReloadMovesARegistryListener: a reload that changes a prefill's
// bootstrap_port serves the new port's namespace and retires the old one.
func TestReloadMovesARegistryListener(t *testing.T) {
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	d := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	oldPort, newPort := proxytest.FreePort(t), proxytest.FreePort(t)
	l := startLB(t, nil, []*proxytest.Engine{d}, func(c *config.Config) {
		c.Bootstrap = config.Bootstrap{Mode: "embedded", AdvertiseHost: "127.0.0.1", ListenHost: "127.0.0.1", InfoWait: time.Second}
		c.Prefill = []config.Prefill{{URL: p.URL, BootstrapPort: &oldPort}}
	})
	listening := func(port int) bool {
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err == nil {
			c.Close()
		}
		return err == nil
	}
	if !listening(oldPort) {
		t.Fatalf("registry not listening on %d", oldPort)
	}
	cp := *l.svc.Config()
	cp.Prefill = []config.Prefill{{URL: p.URL, BootstrapPort: &newPort}}
	if err := l.svc.Apply(&cp); err != nil {
		t.Fatal(err)
	}
	if !proxytest.WaitFor(3*time.Second, func() bool { return listening(newPort) && !listening(oldPort) }) {
		t.Fatalf("after the reload: new port %d listening %v, old port %d listening %v",
			newPort, listening(newPort), oldPort, listening(oldPort))
	}
	b := l.pool.Backends(proxy.Prefill)[0]
	if bs := b.Bootstrap(); bs.Port == nil || *bs.Port != newPort || bs.Addr != "127.0.0.1:"+strconv.Itoa(newPort) {
		t.Fatalf("prefill rendezvous after reload = %+v", bs)
	}
}
