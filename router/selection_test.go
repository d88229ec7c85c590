package router

import (
	"testing"
	"time"

	"pdlb/config"
	"pdlb/proxy"
)

// TestPickPairAllocatesNothing: choosing a pair allocates nothing, with or
// without avoided pairs. The filters handed to the policies were closures
// once, which escaped into the policy interface: 5 allocations per pair,
// 9 with a pair avoided (selection.go).
func TestPickPairAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector drops sync.Pool items: allocation counts do not hold under it")
	}
	pool := proxy.NewPool(nil)
	prefills, decodes := testBackends(t, proxy.Prefill, 4), testBackends(t, proxy.Decode, 4)
	for _, b := range append(prefills, decodes...) {
		pool.Add(b)
	}
	r := New(Options{Settings: SettingsFrom(&config.Config{Policy: config.Default().Policy}), Pool: pool, Log: testLog(t)})
	q := &request{r: r}
	pick := func() {
		pt, dt, msg := r.pickPair(q, decodes[3:])
		if msg != "" {
			t.Fatal(msg)
		}
		pt.Release()
		dt.Release()
	}
	if n := testing.AllocsPerRun(200, pick); n != 0 {
		t.Errorf("pickPair: %v allocations per pair, want 0", n)
	}
	// A pair avoided by pair health and one this request failed: the
	// prefills are offered one by one.
	r.pairs.setRule(PairRule{Failures: 1, Window: time.Minute, Cooldown: time.Hour})
	r.pairs.failed(prefills[0].URL, decodes[0].URL)
	q.failedPairs = []Pair{{prefills[1].URL, decodes[1].URL}}
	if n := testing.AllocsPerRun(200, pick); n != 0 {
		t.Errorf("pickPair with avoided pairs: %v allocations per pair, want 0", n)
	}
}
