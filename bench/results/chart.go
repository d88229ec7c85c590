package main

import (
	"fmt"
	"html"
	"io"
	"math"

	"pdlb/bench/load"
)

// writeChart draws grouped bars: latency p50/p90/p99/p99.9 per target, for
// run (a) and run (b) side by side, on a log scale (the tails matter).
func writeChart(w io.Writer, runs ...*load.Report) error {
	const (
		width, panelH = 900, 300
		left, top     = 70, 40
	)
	colors := []string{"#4063d8", "#e3892b", "#389826", "#9558b2", "#cb3c33"}
	pcts := []struct {
		name string
		get  func(load.Percentiles) float64
	}{
		{"p50", func(p load.Percentiles) float64 { return p.P50 }},
		{"p90", func(p load.Percentiles) float64 { return p.P90 }},
		{"p99", func(p load.Percentiles) float64 { return p.P99 }},
		{"p99.9", func(p load.Percentiles) float64 { return p.P999 }},
	}
	height := top + len(runs)*(panelH+60)
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(w, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(w, `<text x="%d" y="22" font-size="16">Latency percentiles per target (ms, log scale; lower is better)</text>`+"\n", left)
	for pi, r := range runs {
		y0 := top + pi*(panelH+60) + 20
		title := fmt.Sprintf("(a) max throughput, concurrency %d", r.Config.Concurrency)
		names := namesA
		if r.Config.Rate > 0 {
			title = fmt.Sprintf("fixed rate %.0f req/s (open loop)", r.Config.Rate)
			names = namesB
		}
		fmt.Fprintf(w, `<text x="%d" y="%d" font-size="14">%s</text>`+"\n", left, y0, html.EscapeString(title))
		lo, hi := math.Inf(1), 0.0
		for _, t := range r.Targets {
			for _, p := range pcts {
				if v := p.get(t.Median.Latency); v > 0 {
					lo, hi = math.Min(lo, v), math.Max(hi, v)
				}
			}
		}
		if hi == 0 {
			continue
		}
		lo = math.Pow(10, math.Floor(math.Log10(lo)))
		hi = math.Pow(10, math.Ceil(math.Log10(hi)))
		plotTop, plotH := float64(y0+15), float64(panelH-40)
		yOf := func(v float64) float64 {
			return plotTop + plotH - plotH*(math.Log10(v)-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))
		}
		for d := lo; d <= hi*1.0001; d *= 10 {
			y := yOf(d)
			fmt.Fprintf(w, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%g</text>`+"\n", left, width-20, y, y, left-6, y+4, d)
		}
		groupW := float64(width-left-40) / float64(len(pcts))
		barW := groupW * 0.8 / float64(len(r.Targets))
		for gi, p := range pcts {
			gx := float64(left) + float64(gi)*groupW + groupW*0.1
			fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", gx+groupW*0.4, plotTop+plotH+16, p.name)
			for ti, t := range r.Targets {
				v := p.get(t.Median.Latency)
				if v <= 0 {
					continue
				}
				y := yOf(v)
				fmt.Fprintf(w, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s: %.3g ms</title></rect>`+"\n",
					gx+float64(ti)*barW, y, barW-2, plotTop+plotH-y, colors[ti%len(colors)], html.EscapeString(t.URL), p.name, v)
			}
		}
		for ti, t := range r.Targets {
			lx := left + ti*200
			fmt.Fprintf(w, `<rect x="%d" y="%.1f" width="10" height="10" fill="%s"/><text x="%d" y="%.1f">%c %s</text>`+"\n",
				lx, plotTop+plotH+26, colors[ti%len(colors)], lx+14, plotTop+plotH+35, 'A'+ti, html.EscapeString(name(names, ti)+" "+t.URL))
		}
	}
	_, err := fmt.Fprintln(w, "</svg>")
	return err
}
