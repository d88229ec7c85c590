package load

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestPercentilesKnownSet(t *testing.T) {
	s := make([]time.Duration, 1000)
	for i := range s {
		s[i] = time.Duration(i+1) * time.Millisecond
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
	got := percentilesOf(s)
	want := Percentiles{Count: 1000, Mean: 500.5, P50: 500, P90: 900, P99: 990, P999: 999, Max: 1000}
	if got != want {
		t.Errorf("percentilesOf(1..1000 ms) = %+v, want %+v", got, want)
	}
	if got := percentilesOf([]time.Duration{7 * time.Millisecond}); got.P50 != 7 || got.P999 != 7 || got.Max != 7 {
		t.Errorf("one sample: %+v", got)
	}
	if got := percentilesOf(nil); got != (Percentiles{}) {
		t.Errorf("no samples: %+v", got)
	}
}

func TestHistogramWithinRelativeError(t *testing.T) {
	var h, a, b histogram
	// 1 µs .. 100 ms, split over two histograms to exercise merge.
	for i := 1; i <= 100000; i++ {
		d := time.Duration(i) * time.Microsecond
		if i%2 == 0 {
			a.record(d)
		} else {
			b.record(d)
		}
	}
	h.merge(&a)
	h.merge(&b)
	got := h.percentiles()
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"p50", got.P50, 50}, {"p90", got.P90, 90}, {"p99", got.P99, 99}, {"p99.9", got.P999, 99.9}, {"max", got.Max, 100},
	} {
		if rel := math.Abs(c.got-c.want) / c.want; rel > 1.0/128 {
			t.Errorf("%s = %.4f ms, want %.4f ± 1/128", c.name, c.got, c.want)
		}
	}
	if got.Count != 100000 {
		t.Errorf("count = %d", got.Count)
	}
	var small histogram
	for _, us := range []int{3, 5, 9} {
		small.record(time.Duration(us) * time.Microsecond)
	}
	if q := small.quantile(500); q != 5*time.Microsecond {
		t.Errorf("exact region: median = %v, want 5µs", q)
	}
}
