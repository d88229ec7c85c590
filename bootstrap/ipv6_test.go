package bootstrap

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"pdlb/config"
	"pdlb/proxy/proxytest"
)

// TestIPv6Registry: every client of a registry (registration, lookups, the
// external-mode poller) reaches one on an IPv6 address. They dialled IPv4
// only, so a prefill at [::1] never became ready ("couldn't find dns
// entries for the given domain").
func TestIPv6Registry(t *testing.T) {
	e := startRegistryOn(t, config.Bootstrap{}, proxytest.ListenIPv6(t))
	if e.addr[0] != '[' {
		t.Fatalf("registry address %s", e.addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	p := NewPoller(PollerOptions{Interval: 5 * time.Millisecond, Refresh: time.Hour}, zerolog.Nop())
	defer p.Close()
	p.Add(e.addr)

	reg := NewRegistrar(RegistrarOptions{URL: e.base, Attempts: 1, FailFast: true})
	if err := reg.Register(ctx, RankRegistration{AttnTPSize: 1, AttnCPSize: 1, AttnDPSize: 1, PPSize: 1, SystemDPSize: 1,
		RankIP: "::1", RankPort: 17000, PageSize: new(64)}); err != nil {
		t.Fatalf("registration to %s: %v", e.base, err)
	}
	info, err := FetchPrefillInfo(ctx, nil, e.base, 1, time.Millisecond, nil)
	if err != nil || info.Ranks() != 1 {
		t.Fatalf("lookup of %s: %+v %v", e.base, info, err)
	}
	if _, err := p.WaitInfo(ctx, e.addr); err != nil || !p.Ready(e.addr) {
		t.Fatalf("poller of %s: %v", e.addr, err)
	}
}
