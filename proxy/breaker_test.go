package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/sony/gobreaker/v2"

	"pdlb/config"
	"pdlb/proxy/proxytest"
)

var breakerBackend = &Backend{URL: "http://d:1", Role: Decode}

// feed reports one outcome per letter: s success, f failure (a 500), x
// excluded (pdlb cut the leg). The n-th failure's message ends in n.
func feed(t *testing.T, br *Breaker, outcomes string) {
	t.Helper()
	for i, c := range outcomes {
		done, err := br.allow()
		if err != nil {
			t.Fatalf("outcome %d (%c) of %q: breaker refused: %v", i, c, outcomes, err)
		}
		switch c {
		case 's':
			br.record(done, nil)
		case 'f':
			br.record(done, &UpstreamError{Backend: breakerBackend, Kind: KindStatus, Status: 500, Body: []byte("failure " + strconv.Itoa(i))})
		case 'x':
			br.record(done, errExcluded)
		default:
			t.Fatalf("bad outcome %c", c)
		}
	}
}

func waitHalfOpen(br *Breaker) bool {
	return proxytest.WaitFor(time.Second, func() bool { return br.State() == gobreaker.StateHalfOpen })
}

// mirror is the lock-free copy of the state that selection reads.
func mirror(br *Breaker) gobreaker.State { return gobreaker.State(br.state.Load()) }

func TestBreakerTripsAfterConsecutiveFailures(t *testing.T) {
	cfg := config.Breaker{ConsecutiveFailures: 3, Window: time.Minute, OpenTimeout: time.Minute, HalfOpenMaxRequests: 1}
	for _, tc := range []struct {
		outcomes string
		want     gobreaker.State
	}{
		{"ff", gobreaker.StateClosed},
		{"fff", gobreaker.StateOpen},
		{"ffsff", gobreaker.StateClosed}, // a success resets the run
		{"sssfff", gobreaker.StateOpen},
		{"ffxf", gobreaker.StateOpen}, // a cancellation neither resets nor counts
		{"xxxxx", gobreaker.StateClosed},
	} {
		t.Run(tc.outcomes, func(t *testing.T) {
			br := NewBreaker("d", cfg, zerolog.New(io.Discard), nil)
			feed(t, br, tc.outcomes)
			if got := br.State(); got != tc.want {
				t.Fatalf("state %v, want %v", got, tc.want)
			}
			if mirror(br) != tc.want {
				t.Fatalf("mirror %v, breaker %v", mirror(br), tc.want)
			}
		})
	}
}

// TestBreakerRatioRule: with the consecutive rule off, the breaker trips
// once failures reach failure_ratio of at least min_requests counted
// outcomes. Outcomes pdlb caused itself (a leg it cut) are no outcome of
// the backend's: they neither make up min_requests nor dilute the ratio.
func TestBreakerRatioRule(t *testing.T) {
	cfg := config.Breaker{FailureRatio: 0.5, MinRequests: 4, Window: time.Minute, OpenTimeout: time.Minute, HalfOpenMaxRequests: 1}
	for _, tc := range []struct {
		name     string
		outcomes string
		want     gobreaker.State
	}{
		{"every failure but below min_requests", "fff", gobreaker.StateClosed},
		{"half of min_requests failed", "ssff", gobreaker.StateOpen},
		{"interleaved", "sfsf", gobreaker.StateOpen},
		{"under the ratio", "sssf", gobreaker.StateClosed},
		{"under the ratio past min_requests", "sssff", gobreaker.StateClosed},
		{"cancellations do not make up min_requests", "xxff", gobreaker.StateClosed},
		{"cancellations do not dilute the ratio", "xxxxsfsf", gobreaker.StateOpen},
	} {
		t.Run(tc.name, func(t *testing.T) {
			br := NewBreaker("d", cfg, zerolog.New(io.Discard), nil)
			feed(t, br, tc.outcomes)
			if got := br.State(); got != tc.want {
				t.Fatalf("%s: state %v, want %v", tc.outcomes, got, tc.want)
			}
		})
	}
}

// TestBreakerMirrorRefusesUntilOpenTimeout: selection's lock-free check
// skips an open breaker until open_timeout has passed since it opened, by
// the clock selection passes in.
func TestBreakerMirrorRefusesUntilOpenTimeout(t *testing.T) {
	cfg := config.Breaker{ConsecutiveFailures: 1, Window: time.Minute, OpenTimeout: 30 * time.Second, HalfOpenMaxRequests: 1}
	br := NewBreaker("d", cfg, zerolog.New(io.Discard), nil)
	far := time.Now().Add(time.Hour)
	if !br.mayAllow(far) || !br.mayAllow(time.Time{}) {
		t.Fatal("a closed breaker refused")
	}
	before := time.Now()
	feed(t, br, "f")
	after := time.Now()
	opened := time.Unix(0, br.openedAt.Load())
	if opened.Before(before) || opened.After(after) {
		t.Fatalf("openedAt %v not when the breaker opened (%v..%v)", opened, before, after)
	}
	for _, tc := range []struct {
		at   time.Time
		want bool
	}{
		{opened, false},
		{opened.Add(30*time.Second - time.Nanosecond), false},
		{opened.Add(30 * time.Second), true},
		{far, true},
	} {
		if got := br.mayAllow(tc.at); got != tc.want {
			t.Errorf("mayAllow(opened+%v) = %v, want %v", tc.at.Sub(opened), got, tc.want)
		}
	}
}

// TestBreakerGoesHalfOpenAfterOpenTimeout: gobreaker keeps its own clock,
// so this one waits the (short) open_timeout for real.
func TestBreakerGoesHalfOpenAfterOpenTimeout(t *testing.T) {
	cfg := config.Breaker{ConsecutiveFailures: 1, Window: time.Minute, OpenTimeout: 5 * time.Millisecond, HalfOpenMaxRequests: 1}
	br := NewBreaker("d", cfg, zerolog.New(io.Discard), nil)
	feed(t, br, "f")
	if _, err := br.allow(); !errors.Is(err, gobreaker.ErrOpenState) {
		// Only if the machine stalled past open_timeout right here.
		t.Logf("allow right after tripping: %v", err)
	}
	if !waitHalfOpen(br) {
		t.Fatalf("state %v long after open_timeout", br.State())
	}
	if mirror(br) != gobreaker.StateHalfOpen || !br.mayAllow(time.Now()) {
		t.Fatalf("mirror %v, mayAllow %v: selection still skips a half-open breaker", mirror(br), br.mayAllow(time.Now()))
	}
}

// TestBreakerHalfOpenAdmitsAtMostHalfOpenMaxRequests: that many probes get
// through; all of them succeeding closes the breaker, one failing opens it
// again.
func TestBreakerHalfOpenAdmitsAtMostHalfOpenMaxRequests(t *testing.T) {
	for _, tc := range []struct {
		probes   uint32
		outcomes string
		want     gobreaker.State
	}{
		{1, "s", gobreaker.StateClosed},
		{1, "f", gobreaker.StateOpen},
		{3, "sss", gobreaker.StateClosed},
		{3, "ssf", gobreaker.StateOpen},
	} {
		t.Run(strconv.Itoa(int(tc.probes))+" "+tc.outcomes, func(t *testing.T) {
			cfg := config.Breaker{ConsecutiveFailures: 1, Window: time.Minute, OpenTimeout: 5 * time.Millisecond, HalfOpenMaxRequests: tc.probes}
			br := NewBreaker("d", cfg, zerolog.New(io.Discard), nil)
			feed(t, br, "f")
			if !waitHalfOpen(br) {
				t.Fatal("never half-open")
			}
			dones := make([]func(error), 0, tc.probes)
			for i := range tc.probes {
				done, err := br.allow()
				if err != nil {
					t.Fatalf("probe %d of %d refused: %v", i+1, tc.probes, err)
				}
				dones = append(dones, done)
			}
			if _, err := br.allow(); !errors.Is(err, gobreaker.ErrTooManyRequests) {
				t.Fatalf("probe %d admitted (err %v), limit %d", tc.probes+1, err, tc.probes)
			}
			for i, c := range tc.outcomes {
				var err error
				if c == 'f' {
					err = &UpstreamError{Backend: breakerBackend, Kind: KindConnect}
				}
				br.record(dones[i], err)
			}
			if got := br.State(); got != tc.want {
				t.Fatalf("state %v after probes %s, want %v", got, tc.outcomes, tc.want)
			}
			if mirror(br) != tc.want {
				t.Fatalf("mirror %v, want %v", mirror(br), tc.want)
			}
		})
	}
}

// TestBreakerHookAndMirrorAgree: every transition reaches the hook (the
// metrics) and the mirror (selection) with the same states.
func TestBreakerHookAndMirrorAgree(t *testing.T) {
	type change struct{ from, to gobreaker.State }
	var got []change
	cfg := config.Breaker{ConsecutiveFailures: 1, Window: time.Minute, OpenTimeout: 5 * time.Millisecond, HalfOpenMaxRequests: 1}
	br := NewBreaker("decode http://d:1", cfg, zerolog.New(io.Discard), func(name string, from, to gobreaker.State) {
		if name != "decode http://d:1" {
			t.Errorf("hook told name %q", name)
		}
		got = append(got, change{from, to}) // under gobreaker's lock: no concurrent calls
	})
	steps := []struct {
		name string
		do   func()
		want change
	}{
		{"trip", func() { feed(t, br, "f") }, change{gobreaker.StateClosed, gobreaker.StateOpen}},
		{"half-open", func() { waitHalfOpen(br) }, change{gobreaker.StateOpen, gobreaker.StateHalfOpen}},
		{"failed probe", func() { feed(t, br, "f") }, change{gobreaker.StateHalfOpen, gobreaker.StateOpen}},
		{"half-open again", func() { waitHalfOpen(br) }, change{gobreaker.StateOpen, gobreaker.StateHalfOpen}},
		{"good probe", func() { feed(t, br, "s") }, change{gobreaker.StateHalfOpen, gobreaker.StateClosed}},
	}
	for i, s := range steps {
		s.do()
		if len(got) != i+1 || got[i] != s.want {
			t.Fatalf("after %s: hook saw %v, want the last to be %v", s.name, got, s.want)
		}
		if m, st := mirror(br), br.State(); m != s.want.to || st != s.want.to {
			t.Fatalf("after %s: mirror %v, breaker %v, want %v", s.name, m, st, s.want.to)
		}
	}
}

// TestBreakerLogsTheCauseOfTheTrip: the state-change lines name the
// backend and the failure that tripped it; a leg cut since (admitted
// before the trip, settled after it) does not replace that cause.
func TestBreakerLogsTheCauseOfTheTrip(t *testing.T) {
	var buf proxytest.SyncBuffer
	cfg := config.Breaker{ConsecutiveFailures: 2, Window: time.Minute, OpenTimeout: 5 * time.Millisecond, HalfOpenMaxRequests: 1}
	br := NewBreaker("decode http://d:1", cfg, zerolog.New(&buf), nil)
	cut, err := br.allow()
	if err != nil {
		t.Fatal(err)
	}
	feed(t, br, "ff") // failure 1 trips it
	br.record(cut, errExcluded)
	waitHalfOpen(br)
	feed(t, br, "s")

	type line struct {
		Level, Backend, From, To, Cause, Message string
	}
	var lines []line
	for _, raw := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		var l line
		if err := json.Unmarshal(raw, &l); err != nil {
			t.Fatalf("log line %q: %v", raw, err)
		}
		lines = append(lines, l)
	}
	cause := (&UpstreamError{Backend: breakerBackend, Kind: KindStatus, Status: 500, Body: []byte("failure 1")}).Error()
	want := []line{
		{"warn", "decode http://d:1", "closed", "open", cause, "circuit breaker state changed"},
		{"warn", "decode http://d:1", "open", "half-open", cause, "circuit breaker state changed"},
		// The closing line's cause is not pinned: it repeats the last failure.
		{"info", "decode http://d:1", "half-open", "closed", "", "circuit breaker state changed"},
	}
	if len(lines) != len(want) {
		t.Fatalf("log lines %+v, want %+v", lines, want)
	}
	for i := range want {
		if i == 2 {
			lines[i].Cause = ""
		}
		if lines[i] != want[i] {
			t.Errorf("line %d\n got %+v\nwant %+v", i, lines[i], want[i])
		}
	}
}
