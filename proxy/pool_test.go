package proxy

import (
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/sony/gobreaker/v2"

	"pdlb/config"
)

// counts reads b's breaker counters.
func counts(b *Backend) gobreaker.Counts { return b.Breaker().cb.Counts() }

// outcomes is what a breaker was told: successes, failures, exclusions.
type outcomes struct{ ok, failed, excluded uint32 }

func outcomesOf(b *Backend) outcomes {
	c := counts(b)
	return outcomes{c.TotalSuccesses, c.TotalFailures, c.TotalExclusions}
}

// readyMap is a registry's readiness by bootstrap address.
type readyMap map[string]bool

func (m readyMap) Ready(addr string) bool { return m[addr] }

// testBreakerConfig trips after two failures in a row and stays open a
// minute (by the clock of whoever asks).
func testBreakerConfig() config.Breaker {
	return config.Breaker{Enabled: true, ConsecutiveFailures: 2, Window: time.Minute, OpenTimeout: time.Minute, HalfOpenMaxRequests: 1}
}

func withBreaker(t *testing.T, b *Backend) *Breaker {
	t.Helper()
	br := NewBreaker(b.URL, testBreakerConfig(), zerolog.New(io.Discard), nil)
	b.SetBreaker(br)
	return br
}

// TestPoolAddReplacesTheSameEngineSpelledDifferently: two spellings of one
// engine are one backend; adding the second replaces the first.
func TestPoolAddReplacesTheSameEngineSpelledDifferently(t *testing.T) {
	p := NewPool(nil)
	first := mustBackend(t, "http://h:80/", Decode)
	second := mustBackend(t, "http://H", Decode)
	other := mustBackend(t, "http://h:81", Decode)
	samePrefill := mustBackend(t, "http://h", Prefill)
	p.Add(first)
	p.Add(other)
	p.Add(second)
	p.Add(samePrefill)
	got := p.Backends(Decode)
	if len(got) != 2 || got[0] != other || got[1] != second {
		t.Fatalf("decodes %v, want [h:81, H] (the second spelling replaced the first)", urls(got))
	}
	if got := p.Backends(Prefill); len(got) != 1 || got[0] != samePrefill {
		t.Fatalf("prefills %v: a role's backends are its own", urls(got))
	}
}

func urls(bs []*Backend) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = b.URL
	}
	return out
}

// TestPoolRemove takes out exactly the backend given: not a newer one
// that replaced it under the same URL (a reload racing a removal).
func TestPoolRemove(t *testing.T) {
	p := NewPool(nil)
	old := mustBackend(t, "http://h:1", Decode)
	other := mustBackend(t, "http://h:2", Decode)
	p.Add(old)
	p.Add(other)
	if !p.Remove(other) || p.Remove(other) {
		t.Fatal("Remove: want true once, then false")
	}
	replacement := mustBackend(t, "http://h:1/", Decode)
	p.Add(replacement)
	if p.Remove(old) {
		t.Fatal("removing a replaced backend reported true")
	}
	if got := p.Backends(Decode); len(got) != 1 || got[0] != replacement {
		t.Fatalf("decodes %v, want the replacement only", urls(got))
	}
	before := p.Backends(Decode)
	p.Remove(replacement)
	if len(before) != 1 || len(p.Backends(Decode)) != 0 {
		t.Fatal("Remove changed a slice a reader already held, or removed nothing")
	}
}

func TestPoolFindByAnySpelling(t *testing.T) {
	p := NewPool(nil)
	pb := mustBackend(t, "http://Engine-A:30000", Prefill)
	db := mustBackend(t, "http://[::1]:30001", Decode)
	web := mustBackend(t, "http://web", Decode)
	p.Add(pb)
	p.Add(db)
	p.Add(web)
	for _, tc := range []struct {
		url  string
		want *Backend
	}{
		{"http://engine-a:30000", pb},
		{"http://ENGINE-A:30000/", pb},
		{"HTTP://engine-a:30000", pb},
		{"http://[::1]:30001", db},
		{"http://web:80", web},
		{"http://web/", web},
		{"http://engine-a:30001", nil},
		{"http://engine-a", nil},
		{"not a url", nil},
		{"", nil},
	} {
		if got := p.Find(tc.url); got != tc.want {
			t.Errorf("Find(%q) = %v, want %v", tc.url, got, tc.want)
		}
	}
}

// trip opens br by failures in a row (testBreakerConfig: two).
func trip(t *testing.T, b *Backend) {
	t.Helper()
	for range 2 {
		tk, ok := b.Acquire()
		if !ok {
			t.Fatal("breaker refused before it tripped")
		}
		tk.Done(&UpstreamError{Backend: b, Kind: KindStatus, Status: 500})
	}
	if st := b.Breaker().State().String(); st != "open" {
		t.Fatalf("breaker %s after two failures", st)
	}
}

// TestPoolAvailable: selection skips a backend that is draining,
// unhealthy, behind an open breaker (until open_timeout has passed by the
// pool's clock) or, for a prefill, whose registry namespace is not ready.
func TestPoolAvailable(t *testing.T) {
	port := 8998
	for _, tc := range []struct {
		name  string
		role  Role
		ready readyMap // nil: no registry gating
		setup func(t *testing.T, b *Backend)
		later time.Duration // how far the pool's clock is ahead
		want  bool
		// wantIgnoringRegistry is AvailableIgnoringRegistry's answer.
		wantIgnoringRegistry bool
	}{
		{name: "plain decode", role: Decode, want: true, wantIgnoringRegistry: true},
		{name: "draining", role: Decode, setup: func(_ *testing.T, b *Backend) { b.Drain() }},
		{name: "unhealthy", role: Decode, setup: func(_ *testing.T, b *Backend) { b.SetHealthy(false) }},
		{name: "healthy again", role: Decode, want: true, wantIgnoringRegistry: true,
			setup: func(_ *testing.T, b *Backend) { b.SetHealthy(false); b.SetHealthy(true) }},
		{name: "closed breaker", role: Decode, want: true, wantIgnoringRegistry: true,
			setup: func(t *testing.T, b *Backend) { withBreaker(t, b) }},
		{name: "open breaker", role: Decode,
			setup: func(t *testing.T, b *Backend) { withBreaker(t, b); trip(t, b) }},
		{name: "open breaker, open_timeout not passed", role: Decode, later: time.Minute - time.Second,
			setup: func(t *testing.T, b *Backend) { withBreaker(t, b); trip(t, b) }},
		{name: "open breaker, open_timeout passed", role: Decode, later: time.Minute + time.Second, want: true, wantIgnoringRegistry: true,
			setup: func(t *testing.T, b *Backend) { withBreaker(t, b); trip(t, b) }},
		{name: "prefill, registry ready", role: Prefill, ready: readyMap{"h:8998": true}, want: true, wantIgnoringRegistry: true,
			setup: func(_ *testing.T, b *Backend) { b.SetBootstrap(&port, "", config.DefaultBootstrapPort) }},
		{name: "prefill, registry not ready", role: Prefill, ready: readyMap{"h:8998": false}, wantIgnoringRegistry: true,
			setup: func(_ *testing.T, b *Backend) { b.SetBootstrap(&port, "", config.DefaultBootstrapPort) }},
		{name: "prefill, another namespace ready", role: Prefill, ready: readyMap{"h:9000": true}, wantIgnoringRegistry: true,
			setup: func(_ *testing.T, b *Backend) { b.SetBootstrap(&port, "", config.DefaultBootstrapPort) }},
		{name: "prefill, no bootstrap recorded", role: Prefill, ready: readyMap{}, want: true, wantIgnoringRegistry: true},
		{name: "prefill, no registry", role: Prefill, want: true, wantIgnoringRegistry: true,
			setup: func(_ *testing.T, b *Backend) { b.SetBootstrap(&port, "", config.DefaultBootstrapPort) }},
		{name: "decode ignores the registry", role: Decode, ready: readyMap{}, want: true, wantIgnoringRegistry: true},
		{name: "prefill ready but draining", role: Prefill, ready: readyMap{"h:8998": true},
			setup: func(_ *testing.T, b *Backend) { b.SetBootstrap(&port, "", config.DefaultBootstrapPort); b.Drain() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p *Pool
			if tc.ready != nil {
				p = NewPool(tc.ready)
			} else {
				p = NewPool(nil)
			}
			b := mustBackend(t, "http://h:30000", tc.role)
			if tc.setup != nil {
				tc.setup(t, b)
			}
			p.Add(b)
			p.now = func() time.Time { return time.Now().Add(tc.later) }
			if got := p.Available(b); got != tc.want {
				t.Errorf("Available = %v, want %v", got, tc.want)
			}
			if got := p.AvailableIgnoringRegistry(b); got != tc.wantIgnoringRegistry {
				t.Errorf("AvailableIgnoringRegistry = %v, want %v", got, tc.wantIgnoringRegistry)
			}
			wantReady := tc.role != Prefill || tc.ready == nil || b.Bootstrap().Addr == "" || tc.ready[b.Bootstrap().Addr]
			if got := p.RegistryReady(b); got != wantReady {
				t.Errorf("RegistryReady = %v, want %v", got, wantReady)
			}
		})
	}
}

// TestTicketBookkeeping: a ticket counts its backend in flight and
// selected until Done or Release, and tells the breaker what the leg's
// outcome means for the backend.
func TestTicketBookkeeping(t *testing.T) {
	eb := &Backend{URL: "http://d:1", Role: Decode} // named in the errors
	for _, tc := range []struct {
		name    string
		settle  func(Ticket)
		outcome outcomes
	}{
		{"success", func(tk Ticket) { tk.Done(nil) }, outcomes{ok: 1}},
		{"4xx: the backend is alive", func(tk Ticket) { tk.Done(&UpstreamError{Backend: eb, Kind: KindStatus, Status: 400}) }, outcomes{ok: 1}},
		{"5xx", func(tk Ticket) { tk.Done(&UpstreamError{Backend: eb, Kind: KindStatus, Status: 503}) }, outcomes{failed: 1}},
		{"connect", func(tk Ticket) { tk.Done(&UpstreamError{Backend: eb, Kind: KindConnect}) }, outcomes{failed: 1}},
		{"timeout", func(tk Ticket) { tk.Done(&UpstreamError{Backend: eb, Kind: KindTimeout, Err: os.ErrDeadlineExceeded}) }, outcomes{failed: 1}},
		{"protocol", func(tk Ticket) { tk.Done(&UpstreamError{Backend: eb, Kind: KindProtocol}) }, outcomes{failed: 1}},
		{"cancelled by pdlb", func(tk Ticket) { tk.Done(&UpstreamError{Backend: eb, Kind: KindCancelled, Err: errCancelled}) }, outcomes{excluded: 1}},
		{"released unused", func(tk Ticket) { tk.Release() }, outcomes{excluded: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := mustBackend(t, "http://d:1", Decode)
			withBreaker(t, b)
			tk, ok := b.Acquire()
			if !ok || tk.Backend() != b {
				t.Fatal("Acquire refused a fresh backend")
			}
			if b.InFlight() != 1 || b.Selected() != 1 {
				t.Fatalf("after Acquire: in flight %d, selected %d, want 1, 1", b.InFlight(), b.Selected())
			}
			tc.settle(tk)
			if b.InFlight() != 0 || b.Selected() != 1 {
				t.Fatalf("after settling: in flight %d, selected %d, want 0, 1", b.InFlight(), b.Selected())
			}
			if got := outcomesOf(b); got != tc.outcome {
				t.Fatalf("breaker told %+v, want %+v", got, tc.outcome)
			}
		})
	}
}

// TestReleaseDoesNotUseUpAHalfOpenProbe: a request refused after admission
// (the other role had nobody) gives its half-open probe back.
func TestReleaseDoesNotUseUpAHalfOpenProbe(t *testing.T) {
	b := mustBackend(t, "http://d:1", Decode)
	cfg := testBreakerConfig()
	cfg.OpenTimeout = time.Millisecond
	b.SetBreaker(NewBreaker(b.URL, cfg, zerolog.New(io.Discard), nil))
	trip(t, b)
	if !waitHalfOpen(b.Breaker()) {
		t.Fatal("breaker never went half-open")
	}
	tk, ok := b.Acquire()
	if !ok {
		t.Fatal("half-open breaker refused its one probe")
	}
	if _, ok := b.Acquire(); ok {
		t.Fatal("half-open breaker admitted a second probe")
	}
	tk.Release()
	tk, ok = b.Acquire()
	if !ok {
		t.Fatal("a released probe was not given back")
	}
	tk.Done(nil)
	if st := b.Breaker().State().String(); st != "closed" {
		t.Fatalf("breaker %s after a successful probe", st)
	}
}

// TestAcquireRefusedByAnOpenBreaker counts nothing in flight.
func TestAcquireRefusedByAnOpenBreaker(t *testing.T) {
	b := mustBackend(t, "http://d:1", Decode)
	withBreaker(t, b)
	trip(t, b)
	selected := b.Selected()
	if _, ok := b.Acquire(); ok {
		t.Fatal("an open breaker admitted a request")
	}
	if b.InFlight() != 0 || b.Selected() != selected {
		t.Fatalf("refused admission counted: in flight %d, selected %d (was %d)", b.InFlight(), b.Selected(), selected)
	}
}

// TestZeroTicketIsInert: a ticket never acquired (a leg that was not
// sent) can be settled without effect.
func TestZeroTicketIsInert(t *testing.T) {
	var tk Ticket
	tk.Done(&UpstreamError{Kind: KindConnect, Err: errors.New("x")})
	tk.Release()
	if tk.Backend() != nil {
		t.Fatal("zero ticket has a backend")
	}
}
