// Command pdlb-results turns bench/run.sh's JSON reports into
// bench/RESULTS.md (tables, the performance bar with verdicts, the exact
// commands, the machine) and an SVG chart of latency percentiles per target.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"pdlb/bench/load"
)

func main() {
	half := flag.String("half-rate", "", "print half of the first target's median throughput in this report (the rate of run b) and exit")
	dir := flag.String("dir", "bench/out", "folder with a.json, b.json, c.json, commands.txt, gobench.txt")
	out := flag.String("o", "bench/RESULTS.md", "markdown file to write")
	chart := flag.String("chart", "bench/RESULTS.svg", "SVG chart to write")
	flag.Parse()
	if *half != "" {
		rep, err := readReport(*half)
		if err != nil {
			fail(err)
		}
		fmt.Printf("%.0f\n", math.Max(1, math.Round(rep.Targets[0].Median.ReqPerSec/2)))
		return
	}
	if err := write(*dir, *out, *chart); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "pdlb-results:", err)
	os.Exit(1)
}

func readReport(path string) (*load.Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r load.Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

func write(dir, outPath, chartPath string) error {
	a, err := readReport(filepath.Join(dir, "a.json"))
	if err != nil {
		return err
	}
	b, err := readReport(filepath.Join(dir, "b.json"))
	if err != nil {
		return err
	}
	b2, _ := readReport(filepath.Join(dir, "b2.json")) // optional
	c, _ := readReport(filepath.Join(dir, "c.json"))   // optional
	cmds, _ := os.ReadFile(filepath.Join(dir, "commands.txt"))
	gobench, _ := os.ReadFile(filepath.Join(dir, "gobench.txt"))

	var w strings.Builder
	m := a.Machine
	fmt.Fprintf(&w, "# pdlb performance results\n\nWritten by `bench/run.sh` on %s. Machine: %d CPUs, %s, %s %s/%s.\n",
		a.Started.UTC().Format(time.DateOnly), m.NumCPU, m.CPUModel, m.Go, m.OS, m.Arch)
	fmt.Fprintf(&w, "Every figure is the median of %d interleaved, rotated rounds (A B C, B C A, C A B …) measured side by side in one run.\n", a.Config.Rounds)
	fmt.Fprintf(&w, "Targets: pdlb (the product: JSON logs, metrics, breakers, health checks on), the *floor* (a bare fasthttp\n")
	fmt.Fprintf(&w, "fan-out proxy that splices three fields into the body, `bench/floor`), and the decode mock addressed directly.\n\n")

	writeBar(&w, a, b, b2, c)
	fmt.Fprintf(&w, "\n![latency percentiles per target](%s)\n", filepath.Base(chartPath))

	fmt.Fprintf(&w, "\n## (a) Maximum throughput — non-stream `/generate`, concurrency %d\n\n", a.Config.Concurrency)
	writeTable(&w, a, namesA)
	fmt.Fprintf(&w, "\n## (b) Fixed rate %.0f req/s (half of pdlb's throughput in a), open loop\n\n", b.Config.Rate)
	writeTable(&w, b, namesB)
	if b2 != nil {
		fmt.Fprintf(&w, "\n## (b2) Fixed rate %.0f req/s, open loop\n\n", b2.Config.Rate)
		writeTable(&w, b2, namesB)
	}
	if c != nil {
		fmt.Fprintf(&w, "\n## (c) %d concurrent streams\n\n", c.Config.Concurrency)
		writeTable(&w, c, namesB)
	}
	if len(gobench) > 0 {
		fmt.Fprintf(&w, "\n## Hot-path micro-benchmarks\n\n```\n%s```\n", gobench)
	}
	fmt.Fprintf(&w, "\n## Commands\n\n```\n%s```\n", cmds)
	if err := os.WriteFile(outPath, []byte(w.String()), 0o644); err != nil {
		return err
	}
	f, err := os.Create(chartPath)
	if err != nil {
		return err
	}
	defer f.Close()
	runs := []*load.Report{a, b}
	if b2 != nil {
		runs = append(runs, b2)
	}
	return writeChart(f, runs...)
}

// The targets of each run, in the order bench/run.sh passes them.
var (
	namesA = []string{"pdlb", "floor", "decode directly", "other LB"}
	namesB = []string{"pdlb", "decode directly", "other LB"}
)

func name(names []string, i int) string {
	if i < len(names) {
		return names[i]
	}
	return fmt.Sprintf("target %d", i+1)
}

// writeBar states the performance bar with the measured figure and a verdict.
func writeBar(w io.Writer, a, b, b2, c *load.Report) {
	fmt.Fprintf(w, "## The bar\n\n| target | measured | bar | verdict |\n|---|---|---|---|\n")
	pdlb, floor := a.Targets[0].Median, a.Targets[1].Median
	row := func(name string, got float64, unit, bar string, ok bool) {
		v := "**met**"
		if !ok {
			v = "**missed**"
		}
		fmt.Fprintf(w, "| %s | %s%s | %s | %s |\n", name, num(got), unit, bar, v)
	}
	if floor.CPUMicrosPerReq > 0 {
		r := pdlb.CPUMicrosPerReq / floor.CPUMicrosPerReq
		row(fmt.Sprintf("CPU per request, pdlb ÷ floor (%.1f µs ÷ %.1f µs)", pdlb.CPUMicrosPerReq, floor.CPUMicrosPerReq), r, "×", "≤ 1.15×", r <= 1.15)
	}
	if floor.ReqPerSec > 0 {
		r := pdlb.ReqPerSec / floor.ReqPerSec
		row(fmt.Sprintf("throughput, pdlb ÷ floor (%.0f ÷ %.0f req/s)", pdlb.ReqPerSec, floor.ReqPerSec), r, "×", "≥ 0.9×", r >= 0.9)
	}
	if len(a.Targets) > 3 && a.Targets[3].Median.ReqPerSec > 0 {
		other := a.Targets[3].Median
		r := pdlb.ReqPerSec / other.ReqPerSec
		row(fmt.Sprintf("throughput, pdlb ÷ %s (%.0f ÷ %.0f req/s)", a.Targets[3].URL, pdlb.ReqPerSec, other.ReqPerSec), r, "×", "≥ 15×", r >= 15)
	}
	if len(b.Targets) > 1 {
		added := b.Targets[0].Median.Latency.P99 - b.Targets[1].Median.Latency.P99
		row(fmt.Sprintf("added p99 latency at %.0f req/s, pdlb − direct", b.Config.Rate), added, " ms", "≤ 1 ms", added <= 1)
	}
	if b2 != nil && len(b2.Targets) > 1 {
		added := b2.Targets[0].Median.Latency.P99 - b2.Targets[1].Median.Latency.P99
		row(fmt.Sprintf("added p99 latency at %.0f req/s (b2), pdlb − direct", b2.Config.Rate), added, " ms", "≤ 1 ms", added <= 1)
	}
	if c != nil {
		s := c.Targets[0].Median
		row(fmt.Sprintf("%d streams: errors", c.Config.Concurrency), float64(s.Failed), "", "0", s.Failed == 0 && s.Completed > 0)
		rss := float64(max(s.PeakRSSBytes, s.HWMBytes)) / 1e6
		row("streams: pdlb peak RSS", rss, " MB", "≤ 150 MB", rss <= 150)
		row("streams: pdlb CPU per relayed event", s.CPUMicrosPerEvent, " µs", "≤ 3 µs", s.Events > 0 && s.CPUMicrosPerEvent <= 3)
	}
}

func writeTable(w io.Writer, r *load.Report, names []string) {
	fmt.Fprintf(w, "| metric |")
	for i, t := range r.Targets {
		fmt.Fprintf(w, " %c %s `%s` |", 'A'+i, name(names, i), t.URL)
	}
	fmt.Fprintf(w, "\n|---|")
	for range r.Targets {
		fmt.Fprintf(w, "---|")
	}
	fmt.Fprintln(w)
	rows := []struct {
		name string
		get  func(load.Round) float64
	}{
		{"throughput req/s", func(x load.Round) float64 { return x.ReqPerSec }},
		{"completed", func(x load.Round) float64 { return float64(x.Completed) }},
		{"failed", func(x load.Round) float64 { return float64(x.Failed) }},
		{"latency p50 ms", func(x load.Round) float64 { return x.Latency.P50 }},
		{"latency p90 ms", func(x load.Round) float64 { return x.Latency.P90 }},
		{"latency p99 ms", func(x load.Round) float64 { return x.Latency.P99 }},
		{"latency p99.9 ms", func(x load.Round) float64 { return x.Latency.P999 }},
		{"latency max ms", func(x load.Round) float64 { return x.Latency.Max }},
		{"TTFT p50 ms", func(x load.Round) float64 { return x.TTFT.P50 }},
		{"TTFT p99 ms", func(x load.Round) float64 { return x.TTFT.P99 }},
		{"inter-token p50 ms", func(x load.Round) float64 { return x.ITL.P50 }},
		{"inter-token p99 ms", func(x load.Round) float64 { return x.ITL.P99 }},
		{"streamed events", func(x load.Round) float64 { return float64(x.Events) }},
		{"CPU µs/request", func(x load.Round) float64 { return x.CPUMicrosPerReq }},
		{"CPU µs/event", func(x load.Round) float64 { return x.CPUMicrosPerEvent }},
		{"peak RSS MB", func(x load.Round) float64 { return float64(max(x.PeakRSSBytes, x.HWMBytes)) / 1e6 }},
	}
	for _, row := range rows {
		any := false
		for _, t := range r.Targets {
			any = any || row.get(t.Median) != 0
		}
		if !any {
			continue
		}
		fmt.Fprintf(w, "| %s |", row.name)
		for i, t := range r.Targets {
			v := row.get(t.Median)
			ratio := ""
			if i > 0 {
				if base := row.get(r.Targets[0].Median); base != 0 && v != 0 {
					ratio = fmt.Sprintf(" (%.2f× A)", v/base)
				}
			}
			fmt.Fprintf(w, " %s%s |", num(v), ratio)
		}
		fmt.Fprintln(w)
	}
}

func num(v float64) string {
	switch {
	case v == 0:
		return "0"
	case math.Abs(v) >= 1000:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}
