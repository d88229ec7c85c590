package load

import (
	"math"
	"slices"
)

// field is one number of a Round, addressed so that the table and the median share one list.
type field struct {
	name  string
	float func(*Round) *float64
	count func(*Round) *int64
	div   float64 // the table shows value/div (bytes as MiB); 0 = as is
	// shown, when set, decides whether the table prints the row (given a target's median)
	// instead of "some target's value is not 0": a hit rate of 0 is news when engines report it.
	shown func(*Round) bool
}

func (f field) get(r *Round) float64 {
	if f.float != nil {
		return *f.float(r)
	}
	return float64(*f.count(r))
}

func (f field) set(r *Round, v float64) {
	if f.float != nil {
		*f.float(r) = v
		return
	}
	*f.count(r) = int64(math.Round(v))
}

// fields lists a Round's numbers in the order the table prints them.
var fields = func() []field {
	mib := func(f field) field { f.div = 1 << 20; return f }
	reported := func(f field) field { f.shown = func(r *Round) bool { return r.CachedAnswers > 0 }; return f }
	fl := func(name string, p func(*Round) *float64) field { return field{name: name, float: p} }
	ct := func(name string, p func(*Round) *int64) field { return field{name: name, count: p} }
	out := []field{
		fl("throughput req/s", func(r *Round) *float64 { return &r.ReqPerSec }),
		fl("output tokens/s", func(r *Round) *float64 { return &r.TokensPerSec }),
		ct("completed", func(r *Round) *int64 { return &r.Completed }),
		ct("failed", func(r *Round) *int64 { return &r.Failed }),
		ct("dropped (open loop)", func(r *Round) *int64 { return &r.Dropped }),
		ct("scheduled (open loop)", func(r *Round) *int64 { return &r.Scheduled }),
		ct("prompt tokens", func(r *Round) *int64 { return &r.PromptTokens }),
		reported(ct("cached tokens", func(r *Round) *int64 { return &r.CachedTokens })),
		reported(fl("cache hit rate", func(r *Round) *float64 { return &r.CacheHitRate })),
		ct("answers reporting cache", func(r *Round) *int64 { return &r.CachedAnswers }),
	}
	for _, g := range []struct {
		name string
		p    func(*Round) *Percentiles
	}{
		{"latency", func(r *Round) *Percentiles { return &r.Latency }},
		{"TTFT", func(r *Round) *Percentiles { return &r.TTFT }},
		{"ITL", func(r *Round) *Percentiles { return &r.ITL }},
	} {
		p := g.p
		out = append(out,
			fl(g.name+" p50 ms", func(r *Round) *float64 { return &p(r).P50 }),
			fl(g.name+" p90 ms", func(r *Round) *float64 { return &p(r).P90 }),
			fl(g.name+" p99 ms", func(r *Round) *float64 { return &p(r).P99 }),
			fl(g.name+" p99.9 ms", func(r *Round) *float64 { return &p(r).P999 }),
			fl(g.name+" max ms", func(r *Round) *float64 { return &p(r).Max }),
			fl(g.name+" mean ms", func(r *Round) *float64 { return &p(r).Mean }),
		)
	}
	return append(out,
		fl("CPU µs/request", func(r *Round) *float64 { return &r.CPUMicrosPerReq }),
		fl("CPU µs/event", func(r *Round) *float64 { return &r.CPUMicrosPerEvent }),
		fl("CPU seconds", func(r *Round) *float64 { return &r.CPUSeconds }),
		mib(ct("peak RSS MiB", func(r *Round) *int64 { return &r.PeakRSSBytes })),
		mib(ct("VmHWM MiB", func(r *Round) *int64 { return &r.HWMBytes })),
		fl("seconds", func(r *Round) *float64 { return &r.Seconds }),
	)
}()

// medianRound takes the median of every field over the rounds. Percentile counts and
// token/event totals are medians too; error classes missing from a round count as 0.
func medianRound(rounds []Round) Round {
	out := Round{Round: -1}
	if len(rounds) == 0 {
		return out
	}
	vals := make([]float64, len(rounds))
	med := func(get func(*Round) float64) float64 {
		for i := range rounds {
			vals[i] = get(&rounds[i])
		}
		return median(vals)
	}
	for _, f := range fields {
		f.set(&out, med(f.get))
	}
	out.OutputTokens = int64(math.Round(med(func(r *Round) float64 { return float64(r.OutputTokens) })))
	out.Events = int64(math.Round(med(func(r *Round) float64 { return float64(r.Events) })))
	for _, p := range []func(*Round) *Percentiles{
		func(r *Round) *Percentiles { return &r.Latency },
		func(r *Round) *Percentiles { return &r.TTFT },
		func(r *Round) *Percentiles { return &r.ITL },
	} {
		p(&out).Count = int(math.Round(med(func(r *Round) float64 { return float64(p(r).Count) })))
	}
	for _, class := range errorClasses(rounds) {
		if n := int64(math.Round(med(func(r *Round) float64 { return float64(r.Errors[class]) }))); n > 0 {
			if out.Errors == nil {
				out.Errors = map[string]int64{}
			}
			out.Errors[class] = n
		}
	}
	return out
}

// errorClasses is the sorted union of the classes seen in any round.
func errorClasses(rounds []Round) []string {
	var out []string
	for _, r := range rounds {
		for k := range r.Errors {
			if !slices.Contains(out, k) {
				out = append(out, k)
			}
		}
	}
	slices.Sort(out)
	return out
}

// median sorts v in place; an even count averages the two middle values.
func median(v []float64) float64 {
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}
