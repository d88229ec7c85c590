package bootstrap

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"pdlb/config"
)

func TestPollerFillsCacheFromRegistry(t *testing.T) {
	e := startRegistry(t, config.Bootstrap{})
	// Long intervals: only WaitInfo's immediate fetch can make this test fast.
	p := NewPoller(PollerOptions{Interval: time.Hour, Refresh: time.Hour}, zerolog.Nop())
	defer p.Close()
	p.Add(e.addr)
	var _ Directory = p

	mustStatus(t, "PUT dp0", e.do(t, "PUT", "/route", rankPUT(1, 0, 2, 0, "10.0.0.1", 17000, nil)), 200)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, err := p.WaitInfo(ctx, e.addr)
	cancel()
	if !errors.Is(err, ErrNotReady) {
		t.Fatalf("WaitInfo before ready: %v", err)
	}
	if reg, exp := p.Status(e.addr); reg != 1 || exp != 2 {
		t.Fatalf("Status from the 503 text = %d/%d, want 1/2", reg, exp)
	}
	if p.Ready(e.addr) {
		t.Fatal("Ready before registration")
	}

	mustStatus(t, "PUT dp1", e.do(t, "PUT", "/route", rankPUT(1, 0, 2, 1, "10.0.0.2", 17001, nil)), 200)
	start := time.Now()
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := p.WaitInfo(ctx, e.addr)
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(start) > 2*time.Second || info.DPSize != 2 {
		t.Fatalf("WaitInfo took %v, info %+v", time.Since(start), info)
	}
	if !p.Ready(e.addr) {
		t.Fatal("not Ready after WaitInfo")
	}
	if got, ok := p.Info(e.addr); !ok || got.DPSize != 2 {
		t.Fatalf("Info = %+v %v", got, ok)
	}
	if reg, exp := p.Status(e.addr); reg != 2 || exp != 2 {
		t.Fatalf("Status = %d/%d", reg, exp)
	}
	p.Remove(e.addr)
	if p.Ready(e.addr) {
		t.Fatal("Ready after Remove")
	}
	if _, err := p.WaitInfo(ctx, e.addr); !errors.Is(err, ErrUnknownPrefill) {
		t.Fatalf("after Remove: %v", err)
	}
}

func TestPollerPollsOnItsOwnAndNoticesReset(t *testing.T) {
	e := startRegistry(t, config.Bootstrap{})
	p := NewPoller(PollerOptions{Interval: 5 * time.Millisecond, Refresh: 5 * time.Millisecond}, zerolog.Nop())
	defer p.Close()
	p.Add(e.addr)
	p.Add(e.addr) // idempotent
	mustStatus(t, "PUT", e.do(t, "PUT", "/route", rankPUT(1, 0, 1, 0, "10.0.0.1", 17000, nil)), 200)
	waitFor(t, "ready", func() bool { return p.Ready(e.addr) })
	mustStatus(t, "DELETE", e.do(t, "DELETE", "/route", ""), 200)
	waitFor(t, "not ready after reset", func() bool { return !p.Ready(e.addr) })
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestParseNotReady(t *testing.T) {
	for _, c := range []struct {
		in       string
		reg, exp int
		ok       bool
	}{
		{"Prefill server not fully registered yet (1 of 4 ranks registered).", 1, 4, true},
		{"Prefill server not fully registered yet (0 of ? ranks registered).", 0, 0, true},
		{"Prefill server not fully registered yet (3 workers registered).", 3, 0, true},
		{"nothing", 0, 0, false},
	} {
		reg, exp, ok := parseNotReady([]byte(c.in))
		if reg != c.reg || exp != c.exp || ok != c.ok {
			t.Errorf("%q → %d %d %v", c.in, reg, exp, ok)
		}
	}
}
