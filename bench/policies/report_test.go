package main

import (
	"strings"
	"testing"

	"pdlb/bench/load"
)

func TestImbalance(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{{[]float64{1, 1, 1, 1}, 1}, {[]float64{3, 1, 1, 3}, 1.5}, {[]float64{0, 0}, 0}} {
		if got := imbalance(c.xs); got != c.want {
			t.Errorf("imbalance(%v) = %v, want %v", c.xs, got, c.want)
		}
	}
}

func TestBars(t *testing.T) {
	ttft := func(mean, p99 float64) load.Percentiles { return load.Percentiles{Mean: mean, P99: p99} }
	rs := []result{
		{Prefill: "random", Decode: "random", TTFT: ttft(100, 400), HitRate: 0.5, HitRateBound: 0.9, PrefillImbalance: 1.1},
		{Prefill: "cache_aware", Decode: "power_of_two", TTFT: ttft(40, 200), HitRate: 0.86, HitRateBound: 0.9, PrefillImbalance: 1.35},
		{Prefill: "power_of_two", Decode: "power_of_two", TTFT: ttft(90, 300), HitRate: 0.5, HitRateBound: 0.9, PrefillImbalance: 1.0},
	}
	got := bars("shared", rs, &rs[0])
	for _, want := range []string{"`cache_aware / power_of_two`", "gap closed 90 % (bar ≥ 80 %: met)", "mean TTFT 0.40× (bar ≤ 0.5×: met)",
		"p99 TTFT 0.50× (bar ≤ 0.7×: met)", "prefill imbalance 1.350 (bar ≤ 1.3: **not met**)", "what bounds it"} {
		if !strings.Contains(got, want) {
			t.Errorf("bars line lacks %q:\n%s", want, got)
		}
	}
	if got := bars("unique", rs, &rs[0]); !strings.Contains(got, "`cache_aware`: mean TTFT 0.44× `power_of_two`'s (bar ≤ 1.05×: met)") {
		t.Errorf("control's bars line: %s", got)
	}
}
