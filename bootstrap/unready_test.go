package bootstrap

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"pdlb"
	"pdlb/config"
	"pdlb/proxy/proxytest"
)

// logLines decodes the JSON log lines written so far.
func logLines(t *testing.T, buf *proxytest.SyncBuffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(buf.Bytes())), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// warnings are the warn lines among lines.
func warnings(lines []map[string]any) []map[string]any {
	var out []map[string]any
	for _, l := range lines {
		if l["level"] == "warn" {
			out = append(out, l)
		}
	}
	return out
}

// blockingSleep waits only for its context: the poll loop polls once and
// then leaves the test to drive polls by hand.
func blockingSleep(ctx context.Context, _ time.Duration) error {
	<-ctx.Done()
	return ctx.Err()
}

// TestPollerLogsAnUnreachableRegistry: a registry that cannot be reached is
// logged at warn at its first failure, with the root cause, then once per
// UnreadyLogEvery with how long it has been unready (it was logged at
// debug only, so a user saw 503s and no reason).
func TestPollerLogsAnUnreachableRegistry(t *testing.T) {
	addr := proxytest.ClosedAddr(t) // nothing listens: connection refused
	clk := newFakeClock()
	buf := &proxytest.SyncBuffer{}
	p := NewPoller(PollerOptions{Interval: time.Second, Refresh: time.Second, Clock: pdlb.Clock{Now: clk.Now, Sleep: blockingSleep}},
		zerolog.New(buf).Level(zerolog.InfoLevel))
	defer p.Close()
	p.Add(addr)
	tgt := p.targets.Load()[addr]
	if !proxytest.WaitFor(5*time.Second, func() bool { return len(warnings(logLines(t, buf))) == 1 }) {
		t.Fatalf("no warning after the first failed poll: %s", buf.Bytes())
	}
	w := warnings(logLines(t, buf))[0]
	if w["bootstrap_addr"] != addr || !strings.Contains(w["cause"].(string), "connection refused") || w["unready_for"] != 0.0 {
		t.Fatalf("first warning %v, want the address, the root cause and unready_for 0", w)
	}
	clk.Advance(UnreadyLogEvery / 2)
	p.poll(tgt)
	if n := len(warnings(logLines(t, buf))); n != 1 {
		t.Fatalf("%d warnings within UnreadyLogEvery, want 1", n)
	}
	clk.Advance(UnreadyLogEvery / 2)
	p.poll(tgt)
	ws := warnings(logLines(t, buf))
	if len(ws) != 2 || ws[1]["unready_for"] != float64(UnreadyLogEvery.Milliseconds()) {
		t.Fatalf("after UnreadyLogEvery: %v, want a second warning with unready_for %v", ws, UnreadyLogEvery)
	}
}

// TestPollerLogsANotReadyRegistryUntilReady: a reachable registry still
// waiting for ranks is logged with how far registration got; once ready,
// one info line says how long that took, and nothing more is logged.
func TestPollerLogsANotReadyRegistryUntilReady(t *testing.T) {
	e := startRegistry(t, config.Bootstrap{})
	mustStatus(t, "PUT", e.do(t, "PUT", "/route", rankPUT(1, 0, 2, 0, "10.0.0.1", 17000, nil)), 200)
	clk := newFakeClock()
	buf := &proxytest.SyncBuffer{}
	p := NewPoller(PollerOptions{Interval: time.Second, Refresh: time.Second, Clock: pdlb.Clock{Now: clk.Now, Sleep: blockingSleep}},
		zerolog.New(buf).Level(zerolog.InfoLevel))
	defer p.Close()
	p.Add(e.addr)
	if !proxytest.WaitFor(5*time.Second, func() bool { return len(warnings(logLines(t, buf))) == 1 }) {
		t.Fatalf("no warning for a registry with 1 of 2 ranks: %s", buf.Bytes())
	}
	if w := warnings(logLines(t, buf))[0]; !strings.Contains(w["cause"].(string), "1 of 2 ranks registered") {
		t.Fatalf("warning %v, want the registry's own account", w)
	}
	mustStatus(t, "PUT", e.do(t, "PUT", "/route", rankPUT(1, 0, 2, 1, "10.0.0.2", 17001, nil)), 200)
	clk.Advance(3 * UnreadyLogEvery)
	p.poll(p.targets.Load()[e.addr])
	lines := logLines(t, buf)
	last := lines[len(lines)-1]
	if len(warnings(lines)) != 1 || last["message"] != "prefill registry ready" || last["unready_for"] != float64((3*UnreadyLogEvery).Milliseconds()) {
		t.Fatalf("after registration: %v", lines)
	}
}

// TestRegistryReportsUnreadyNamespaces: in embedded mode a namespace whose
// ranks have not all registered is logged at warn with its progress and
// where its ranks must register, then once per UnreadyLogEvery; a ready
// namespace is not.
func TestRegistryReportsUnreadyNamespaces(t *testing.T) {
	buf := &proxytest.SyncBuffer{}
	e := startRegistryLogged(t, config.Bootstrap{AdvertiseHost: "10.1.2.3"}, zerolog.New(buf).Level(zerolog.InfoLevel))
	mustStatus(t, "PUT", e.do(t, "PUT", "/route", rankPUT(1, 0, 2, 0, "10.0.0.1", 17000, nil)), 200)
	e.reg.ReportUnready()
	ws := warnings(logLines(t, buf))
	if len(ws) != 1 || !strings.Contains(ws[0]["cause"].(string), "1 of 2 ranks registered") ||
		ws[0]["register_at"] != "http://10.1.2.3:"+itoa(e.port)+"/route" || !strings.Contains(ws[0]["message"].(string), "bootstrap.mode external") {
		t.Fatalf("warnings %v", ws)
	}
	e.clock.Advance(UnreadyLogEvery - time.Second)
	e.reg.ReportUnready()
	if n := len(warnings(logLines(t, buf))); n != 1 {
		t.Fatalf("%d warnings within UnreadyLogEvery, want 1", n)
	}
	e.clock.Advance(time.Second)
	e.reg.ReportUnready()
	if ws := warnings(logLines(t, buf)); len(ws) != 2 || ws[1]["unready_for"] != float64(UnreadyLogEvery.Milliseconds()) {
		t.Fatalf("after UnreadyLogEvery: %v", ws)
	}
	mustStatus(t, "PUT", e.do(t, "PUT", "/route", rankPUT(1, 0, 2, 1, "10.0.0.2", 17001, nil)), 200)
	e.clock.Advance(10 * UnreadyLogEvery)
	e.reg.ReportUnready()
	if n := len(warnings(logLines(t, buf))); n != 2 {
		t.Fatalf("a ready namespace was reported: %d warnings", n)
	}
}
