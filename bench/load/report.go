package load

import "time"

// Report is everything one Run measured.
type Report struct {
	Machine Machine        `json:"machine"`
	Config  Config         `json:"config"`
	Started time.Time      `json:"started"`
	Targets []TargetReport `json:"targets"`
}

// Config echoes the options that shaped the load, defaults applied.
type Config struct {
	Route       string  `json:"route"`
	Concurrency int     `json:"concurrency"`
	Rate        float64 `json:"rate,omitempty"`
	DurationS   float64 `json:"duration_s,omitempty"`
	Requests    int     `json:"requests,omitempty"`
	Rounds      int     `json:"rounds"`
	Stream      bool    `json:"stream"`
	InputLen    Dist    `json:"input_len"`
	OutputLen   Dist    `json:"output_len"`
	TimeoutS    float64 `json:"timeout_s"`
	Seed        int64   `json:"seed"`
	ClockTicks  int64   `json:"clock_ticks,omitempty"`
	Workload    string  `json:"workload"`
	// The workload's parameters, where it has them.
	SystemPrompts int     `json:"system_prompts,omitempty"`
	SystemLen     int     `json:"system_len,omitempty"`
	ZipfS         float64 `json:"zipf_s,omitempty"`
	Sessions      int     `json:"sessions,omitempty"`
	Turns         Dist    `json:"turns,omitzero"`
	ThinkTimeS    float64 `json:"think_time_s,omitempty"`
}

// TargetReport holds one target's rounds in run order and their per-metric medians.
type TargetReport struct {
	URL    string  `json:"url"`
	PID    int     `json:"pid,omitempty"`
	Rounds []Round `json:"rounds"`
	Median Round   `json:"median"`
}

// Round is one round against one target. With workload multiturn in open loop, Scheduled
// and Dropped count session arrivals, not requests. In Median, each field is the median of that
// field over the rounds (so fields may come from different rounds).
type Round struct {
	Round        int              `json:"round"`
	Seconds      float64          `json:"seconds"`
	Scheduled    int64            `json:"scheduled,omitempty"`
	Completed    int64            `json:"completed"`
	Failed       int64            `json:"failed"`
	Dropped      int64            `json:"dropped,omitempty"`
	Errors       map[string]int64 `json:"errors,omitempty"`
	ReqPerSec    float64          `json:"req_per_s"`
	TokensPerSec float64          `json:"output_tokens_per_s"`
	OutputTokens int64            `json:"output_tokens"`
	Events       int64            `json:"events,omitempty"`
	// PromptTokens sums the prompts of the answered requests as the engines counted them
	// (meta_info.prompt_tokens or usage.prompt_tokens), or their words where an answer does
	// not say. CachedTokens sums what the answers report as served from the prefix cache
	// (meta_info.cached_tokens or usage.prompt_tokens_details.cached_tokens), CachedAnswers
	// counts the answers that reported it at all, and CacheHitRate is CachedTokens/PromptTokens.
	PromptTokens  int64       `json:"prompt_tokens"`
	CachedTokens  int64       `json:"cached_tokens"`
	CachedAnswers int64       `json:"cached_answers"`
	CacheHitRate  float64     `json:"cache_hit_rate"`
	Latency       Percentiles `json:"latency"`
	TTFT          Percentiles `json:"ttft,omitzero"`
	ITL           Percentiles `json:"itl,omitzero"`
	// With a PID: the process's utime+stime over the round per completed request (and per
	// streamed event), its largest sampled VmRSS and its VmHWM at the end of the round.
	CPUMicrosPerReq   float64 `json:"cpu_us_per_req,omitempty"`
	CPUMicrosPerEvent float64 `json:"cpu_us_per_event,omitempty"`
	CPUSeconds        float64 `json:"cpu_s,omitempty"`
	PeakRSSBytes      int64   `json:"peak_rss_bytes,omitempty"`
	HWMBytes          int64   `json:"vm_hwm_bytes,omitempty"`
}

// newRound turns a loop's raw samples into a Round.
func newRound(index int, r roundResult, usage procUsage) Round {
	s := &r.stats
	out := Round{
		Round:         index,
		Seconds:       r.elapsed.Seconds(),
		Scheduled:     r.scheduled,
		Completed:     s.completed,
		Dropped:       r.dropped,
		Errors:        s.errors,
		OutputTokens:  s.tokens,
		Events:        s.events,
		PromptTokens:  s.prompt,
		CachedTokens:  s.cached,
		CachedAnswers: s.cachedN,
		Latency:       percentilesOf(s.latency),
		TTFT:          percentilesOf(s.ttft),
		ITL:           s.itl.percentiles(),
	}
	for _, n := range s.errors {
		out.Failed += n
	}
	if s.prompt > 0 {
		out.CacheHitRate = float64(s.cached) / float64(s.prompt)
	}
	if secs := r.elapsed.Seconds(); secs > 0 {
		out.ReqPerSec = float64(s.completed) / secs
		out.TokensPerSec = float64(s.tokens) / secs
	}
	if usage.ok {
		us := float64(usage.cpu) / float64(time.Microsecond)
		out.CPUSeconds = usage.cpu.Seconds()
		if s.completed > 0 {
			out.CPUMicrosPerReq = us / float64(s.completed)
		}
		if s.events > 0 {
			out.CPUMicrosPerEvent = us / float64(s.events)
		}
		out.PeakRSSBytes = usage.peakRSS
		out.HWMBytes = usage.hwm
	}
	return out
}
