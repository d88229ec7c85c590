package load

import (
	"slices"
	"time"
)

// Percentiles summarise one latency distribution, in milliseconds.
type Percentiles struct {
	Count int     `json:"count"`
	Mean  float64 `json:"mean_ms"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p99_9_ms"`
	Max   float64 `json:"max_ms"`
}

// percentilesOf sorts samples in place and reads nearest-rank percentiles from them.
// Per-request samples are kept exactly (8 bytes each: a million requests is 8 MB).
func percentilesOf(samples []time.Duration) Percentiles {
	if len(samples) == 0 {
		return Percentiles{}
	}
	slices.Sort(samples)
	var sum time.Duration
	for _, s := range samples {
		sum += s
	}
	return Percentiles{
		Count: len(samples),
		Mean:  ms(sum / time.Duration(len(samples))),
		P50:   ms(nearestRank(samples, 500)),
		P90:   ms(nearestRank(samples, 900)),
		P99:   ms(nearestRank(samples, 990)),
		P999:  ms(nearestRank(samples, 999)),
		Max:   ms(samples[len(samples)-1]),
	}
}

// nearestRank is the smallest sample with at least permille/1000 of the samples at or
// below it. Integer arithmetic: 0.999*1000 in float64 rounds up past rank 999.
func nearestRank(sorted []time.Duration, permille int) time.Duration {
	n := len(sorted)
	rank := (permille*n + 999) / 1000
	rank = max(1, min(rank, n))
	return sorted[rank-1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
