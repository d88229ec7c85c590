package router

import (
	"net"
	"strconv"
	"testing"
	"time"

	"pdlb/config"
	"pdlb/proxy"
)

// TestDrainedPrefillRetiresItsRegistryListener: in embedded mode a prefill
// removed at runtime gives its bootstrap port back once it is drained.
func TestDrainedPrefillRetiresItsRegistryListener(t *testing.T) {
	p := newBackend(t, jsonAnswer(200, `{}`))
	d := newBackend(t, jsonAnswer(200, `{}`))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	l := startLB(t, nil, []*backend{d}, func(c *config.Config) {
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
	if !waitFor(3*time.Second, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err != nil
	}) {
		t.Fatal("the drained prefill's registry still listens")
	}
}
