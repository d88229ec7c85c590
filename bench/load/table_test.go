package load

import (
	"strings"
	"testing"
)

func sampleReport() *Report {
	round := func(rps, p99 float64, errs map[string]int64) Round {
		return Round{ReqPerSec: rps, Completed: 100, Latency: Percentiles{Count: 100, P50: 1, P99: p99}, Errors: errs}
	}
	a := []Round{round(1000, 2, nil), round(1200, 4, nil), round(1100, 3, nil)}
	b := []Round{round(2000, 1, nil), round(2400, 1, map[string]int64{"status_503": 2}), round(2200, 2, map[string]int64{"status_503": 4})}
	return &Report{
		Machine: Machine{NumCPU: 2, CPUModel: "Test CPU"},
		Config:  Config{Route: RouteGenerate, Concurrency: 64, Rounds: 3, InputLen: Dist{128, 128}, OutputLen: Dist{64, 512}},
		Targets: []TargetReport{
			{URL: "http://a", Rounds: a, Median: medianRound(a)},
			{URL: "http://b", PID: 42, Rounds: b, Median: medianRound(b)},
		},
	}
}

func TestTableHasRatioColumn(t *testing.T) {
	var sb strings.Builder
	sampleReport().WriteTable(&sb)
	out := sb.String()
	for _, want := range []string{"A = http://a", "B = http://b (pid 42)", "B/A", "throughput req/s", "2.00x", "errors status_503", "64-512"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	// Medians: A 1100 req/s, B 2200 req/s; p99 3 vs 1 ms; 503s median 2 vs 0 (no ratio).
	for _, row := range []string{"throughput req/s 1100 2200 2.00x", "latency p99 ms 3.00 1.00 0.33x", "errors status_503 0 2 -"} {
		if !strings.Contains(squeeze(out), row) {
			t.Errorf("table lacks row %q:\n%s", row, out)
		}
	}
	if strings.Contains(out, "TTFT") {
		t.Errorf("all-zero TTFT rows should be left out:\n%s", out)
	}
}

// squeeze collapses runs of spaces to one, so rows compare without column widths.
func squeeze(s string) string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	return strings.Join(lines, "\n")
}

func TestTableNamesWorkload(t *testing.T) {
	rep := sampleReport()
	rep.Config.Workload, rep.Config.SystemPrompts, rep.Config.SystemLen, rep.Config.ZipfS = WorkloadShared, 16, 1024, 1.1
	var sb strings.Builder
	rep.WriteTable(&sb)
	if want := "workload shared: 16 system prompts of 1024 words (Zipf s=1.1) + user 128 words"; !strings.Contains(sb.String(), want) {
		t.Errorf("table lacks %q:\n%s", want, sb.String())
	}
}
