package sim

import (
	"encoding/json"
	"time"

	"github.com/valyala/fasthttp"

	"pdlb/bench/mock"
)

// Report is what GET /stats answers: the cluster's figures since it started
// or was last reset. Times are real seconds; divide by time_scale for
// simulated ones (ratios need no conversion).
type Report struct {
	// TimeScale is the engines' time scale.
	TimeScale float64 `json:"time_scale"`
	// Window is the real time the figures cover.
	Window float64 `json:"window_s"`
	// Cluster sums the engines.
	Cluster ClusterReport `json:"cluster"`
	// Engines lists the prefills then the decodes, in port order.
	Engines []EngineReport `json:"engines"`
}

// ClusterReport is the cluster's totals.
type ClusterReport struct {
	// PrefillRequests and DecodeRequests count generation requests.
	PrefillRequests int64 `json:"prefill_requests"`
	DecodeRequests  int64 `json:"decode_requests"`
	// InputTokens, CachedTokens and BestCachedTokens sum the prefills'.
	InputTokens      int64 `json:"input_tokens"`
	CachedTokens     int64 `json:"cached_tokens"`
	BestCachedTokens int64 `json:"best_cached_tokens"`
	// OutputTokens sums the decodes'.
	OutputTokens int64 `json:"output_tokens"`
	// HitRate is CachedTokens ÷ InputTokens (0 with no input).
	HitRate float64 `json:"hit_rate"`
	// HitRateBound is BestCachedTokens ÷ InputTokens: the hit rate if every
	// request had gone to the engine holding its longest prefix, with
	// unbounded caches.
	HitRateBound float64 `json:"hit_rate_upper_bound"`
}

// EngineReport is one engine's figures.
type EngineReport struct {
	Role string `json:"role"`
	URL  string `json:"url"`
	// Requests counts generation requests (/generate and the OpenAI routes).
	Requests int64 `json:"requests"`
	// InputTokens, CachedTokens: prompt tokens computed (prefill) or
	// answered for (decode), and of those found in a KV cache (a decode
	// reports its prefills'). BestCachedTokens: a prefill's share of the
	// upper bound.
	InputTokens      int64 `json:"input_tokens"`
	CachedTokens     int64 `json:"cached_tokens"`
	BestCachedTokens int64 `json:"best_cached_tokens"`
	OutputTokens     int64 `json:"output_tokens"`
	// KVCacheTokens is what a prefill's KV cache holds now.
	KVCacheTokens int64 `json:"kv_cache_tokens"`
	// Busy is the time with at least one slot held: a prefill's prefill
	// slots, a decode's batch. Held adds up the time each slot was held.
	Busy float64 `json:"busy_s"`
	Held float64 `json:"held_s"`
	// Utilization is Held ÷ (slots × window): slots are the prefill slots,
	// or the decode's maximum batch.
	Utilization float64 `json:"utilization"`
	// MeanRunning is Held ÷ window: the mean number of slots held.
	MeanRunning float64 `json:"mean_running"`
	// PeakRunning and PeakQueued are the most requests holding and waiting
	// for a slot at once.
	PeakRunning int64 `json:"peak_running"`
	PeakQueued  int64 `json:"peak_queued"`
	// AwaitingKV is a decode's requests waiting for their prefill now.
	AwaitingKV int64 `json:"awaiting_kv"`
}

// Report gathers the engines' figures.
func (c *Cluster) Report() Report {
	c.mu.Lock()
	defer c.mu.Unlock()
	window := time.Since(c.since)
	r := Report{TimeScale: c.opts.TimeScale, Window: window.Seconds()}
	for _, e := range c.engines {
		s := e.e.Stats()
		occ, slots := s.Batch, c.opts.MaxBatch
		if e.role == mock.RolePrefill {
			occ, slots = s.PrefillSlots, c.opts.PrefillSlots
		}
		er := EngineReport{
			Role: e.role, URL: e.url,
			Requests:         s.Requests["/generate"] + s.Requests["/v1/chat/completions"] + s.Requests["/v1/completions"],
			InputTokens:      s.InputTokens,
			CachedTokens:     s.CachedTokens,
			BestCachedTokens: s.BestCachedTokens,
			OutputTokens:     s.OutputTokens,
			KVCacheTokens:    s.KVCacheTokens,
			Busy:             occ.Busy.Seconds(),
			Held:             occ.Held.Seconds(),
			PeakRunning:      occ.PeakRunning,
			PeakQueued:       occ.PeakQueued,
			AwaitingKV:       s.AwaitingKV,
		}
		if w := occ.Window.Seconds(); w > 0 {
			er.MeanRunning = er.Held / w
			er.Utilization = er.Held / (float64(slots) * w)
		}
		r.Engines = append(r.Engines, er)
		t := &r.Cluster
		if e.role == mock.RolePrefill {
			t.PrefillRequests += er.Requests
			t.InputTokens += er.InputTokens
			t.CachedTokens += er.CachedTokens
			t.BestCachedTokens += er.BestCachedTokens
		} else {
			t.DecodeRequests += er.Requests
			t.OutputTokens += er.OutputTokens
		}
	}
	if in := r.Cluster.InputTokens; in > 0 {
		r.Cluster.HitRate = float64(r.Cluster.CachedTokens) / float64(in)
		r.Cluster.HitRateBound = float64(r.Cluster.BestCachedTokens) / float64(in)
	}
	return r
}

// serveStats answers the stats listener: GET /stats (or /), POST /reset.
func (c *Cluster) serveStats(ctx *fasthttp.RequestCtx) {
	switch string(ctx.Path()) {
	case "/", "/stats":
		if !ctx.IsGet() {
			jsonError(ctx, fasthttp.StatusMethodNotAllowed, "use GET")
			return
		}
		b, err := json.MarshalIndent(c.Report(), "", "  ")
		if err != nil {
			jsonError(ctx, fasthttp.StatusInternalServerError, err.Error())
			return
		}
		ctx.SetContentType("application/json")
		ctx.SetBody(append(b, '\n'))
	case "/reset":
		if !ctx.IsPost() {
			jsonError(ctx, fasthttp.StatusMethodNotAllowed, "use POST")
			return
		}
		c.Reset()
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"reset":true}` + "\n")
	default:
		jsonError(ctx, fasthttp.StatusNotFound, "not found: GET /stats, POST /reset")
	}
}

// jsonError answers pdlb's error shape.
func jsonError(ctx *fasthttp.RequestCtx, code int, msg string) {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": "invalid_request_error", "code": code}})
	ctx.SetStatusCode(code)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}
