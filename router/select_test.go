package router

import (
	"strings"
	"testing"
	"time"

	"pdlb/config"
	"pdlb/proxy"
)

func testBackends(t *testing.T, role proxy.Role, n int) []*proxy.Backend {
	t.Helper()
	out := make([]*proxy.Backend, n)
	for i := range out {
		b, err := proxy.NewBackend("http://10.0.0."+string(rune('1'+i))+":30000", role, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = b
	}
	return out
}

func TestRandomSelectorPicksOnlyAcceptableUniformly(t *testing.T) {
	all := testBackends(t, proxy.Decode, 5)
	ok := func(b *proxy.Backend) bool { return b == all[1] || b == all[3] }
	counts := map[*proxy.Backend]int{}
	const draws = 4000
	for range draws {
		counts[RandomSelector{}.Select(all, ok)]++
	}
	if len(counts) != 2 {
		t.Fatalf("picked %d distinct backends, want only the 2 acceptable ones", len(counts))
	}
	for _, b := range []*proxy.Backend{all[1], all[3]} {
		// 2,000 expected; the binomial spread is about 32, so 1,700–2,300
		// fails only when the draw is not uniform.
		if n := counts[b]; n < 1700 || n > 2300 {
			t.Errorf("%s picked %d of %d times, want about half", b.URL, n, draws)
		}
	}
}

func TestRandomSelectorNothingAcceptable(t *testing.T) {
	all := testBackends(t, proxy.Decode, 3)
	if b := (RandomSelector{}).Select(all, func(*proxy.Backend) bool { return false }); b != nil {
		t.Fatalf("picked %s with nothing acceptable", b.URL)
	}
	if b := (RandomSelector{}).Select(nil, func(*proxy.Backend) bool { return true }); b != nil {
		t.Fatal("picked from no candidates")
	}
}

// TestPickPairSkipsExcludedAndRefusingBackends: a backend that failed an
// earlier attempt is not picked again, and one whose half-open breaker
// has no probe left is passed over for another.
func TestPickPairSkipsExcludedAndRefusingBackends(t *testing.T) {
	pool := proxy.NewPool(nil)
	prefills, decodes := testBackends(t, proxy.Prefill, 1), testBackends(t, proxy.Decode, 3)
	for _, b := range append(prefills, decodes...) {
		pool.Add(b)
	}
	r := New(Options{Settings: SettingsFrom(&config.Config{}), Pool: pool, Log: testLog(t)})
	// decodes[0] failed before; decodes[1] holds a breaker with its only
	// half-open probe taken.
	br := proxy.NewBreaker("d1", config.Breaker{Enabled: true, ConsecutiveFailures: 1, OpenTimeout: time.Nanosecond, HalfOpenMaxRequests: 1}, testLog(t), nil)
	decodes[1].SetBreaker(br)
	tk, _ := decodes[1].Acquire()
	tk.Done(&proxy.UpstreamError{Backend: decodes[1], Kind: proxy.KindConnect}) // opens
	time.Sleep(time.Millisecond)                                                // past open_timeout: half-open next
	probe, admitted := decodes[1].Acquire()
	if !admitted {
		t.Fatal("the half-open breaker admitted no probe")
	}
	defer probe.Release()
	for range 50 {
		pt, dt, msg := r.pickPair(&pdRequest{}, []*proxy.Backend{decodes[0]})
		if msg != "" || dt.Backend() != decodes[2] || pt.Backend() != prefills[0] {
			t.Fatalf("picked %v / %v (%q), want the only admissible decode", pt.Backend(), dt.Backend(), msg)
		}
		pt.Release()
		dt.Release()
	}
	_, _, msg := r.pickPair(&pdRequest{}, []*proxy.Backend{decodes[0], decodes[2]})
	if !strings.Contains(msg, "no decode backend available: all 3") {
		t.Fatalf("message %q", msg)
	}
}
