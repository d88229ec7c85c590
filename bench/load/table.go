package load

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteTable prints the per-target medians side by side, one column per target (A, B, …)
// and, with several targets, one ratio column per later target against the first.
func (r *Report) WriteTable(w io.Writer) {
	n := len(r.Targets)
	label := func(i int) string { return string(rune('A' + i%26)) }
	for i, t := range r.Targets {
		pid := ""
		if t.PID > 0 {
			pid = fmt.Sprintf(" (pid %d)", t.PID)
		}
		fmt.Fprintf(w, "%s = %s%s\n", label(i), t.URL, pid)
	}
	c := r.Config
	load := fmt.Sprintf("closed loop, concurrency %d", c.Concurrency)
	switch {
	case c.Workload == WorkloadMultiturn && c.Rate > 0:
		load = fmt.Sprintf("open loop, %.6g sessions/s, at most %d open", c.Rate, c.Sessions)
	case c.Workload == WorkloadMultiturn:
		load = fmt.Sprintf("closed loop, %d sessions", c.Sessions)
	case c.Rate > 0:
		load = fmt.Sprintf("open loop, %.6g req/s, at most %d outstanding", c.Rate, c.Concurrency)
	}
	fmt.Fprintf(w, "%s %s, stream=%t, %s, output %s tokens; median of %d round(s); %d CPUs, %s\n\n",
		c.Route, load, c.Stream, c.workload(), c.OutputLen, c.Rounds, r.Machine.NumCPU, r.Machine.CPUModel)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := []string{"metric"}
	for i := range n {
		head = append(head, label(i))
	}
	for i := 1; i < n; i++ {
		head = append(head, label(i)+"/"+label(0))
	}
	row := func(cells []string) { fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t") }
	row(head)

	vals := make([]float64, n)
	emit := func(name string, isCount bool) {
		cells := []string{name}
		for _, v := range vals {
			cells = append(cells, formatValue(v, isCount))
		}
		for i := 1; i < n; i++ {
			cells = append(cells, ratio(vals[i], vals[0]))
		}
		row(cells)
	}
	for _, f := range fields {
		any := false
		for i := range r.Targets {
			vals[i] = f.get(&r.Targets[i].Median)
			if f.div > 0 {
				vals[i] /= f.div
			}
			if f.shown != nil {
				any = any || f.shown(&r.Targets[i].Median)
			} else {
				any = any || vals[i] != 0
			}
		}
		if any {
			emit(f.name, f.count != nil && f.div == 0)
		}
	}
	var classes []string
	for _, t := range r.Targets {
		classes = append(classes, errorClasses(t.Rounds)...)
	}
	for _, class := range uniqueSorted(classes) {
		for i := range r.Targets {
			vals[i] = float64(r.Targets[i].Median.Errors[class])
		}
		emit("errors "+class, true)
	}
	tw.Flush()
}

// workload describes the prompts in words for the table's header.
func (c *Config) workload() string {
	switch c.Workload {
	case WorkloadMultiturn:
		think := ""
		if c.ThinkTimeS > 0 {
			think = fmt.Sprintf(", think %gs", c.ThinkTimeS)
		}
		return fmt.Sprintf("workload multiturn: %d system prompts of %d words (Zipf s=%g), %s turns of user %s words + answer%s",
			c.SystemPrompts, c.SystemLen, c.ZipfS, c.Turns, c.InputLen, think)
	case WorkloadShared:
		return fmt.Sprintf("workload shared: %d system prompts of %d words (Zipf s=%g) + user %s words",
			c.SystemPrompts, c.SystemLen, c.ZipfS, c.InputLen)
	case WorkloadUnique:
		return fmt.Sprintf("workload unique: %d + %s words, nothing shared", c.SystemLen, c.InputLen)
	}
	return fmt.Sprintf("input %s words", c.InputLen)
}

func formatValue(v float64, isCount bool) string {
	switch {
	case isCount:
		return strconv.FormatInt(int64(v), 10)
	case v >= 1000 || v <= -1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 100 || v <= -100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case v >= 1 || v <= -1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}

func ratio(v, base float64) string {
	if base == 0 {
		return "-"
	}
	return strconv.FormatFloat(v/base, 'f', 2, 64) + "x"
}

func uniqueSorted(s []string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}
