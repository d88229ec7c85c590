package mock

import (
	"github.com/valyala/fasthttp"
)

// SGLang's load routes, for load-aware policies to poll:
//
//   - GET /v1/loads (python/sglang/srt/entrypoints/v1_loads.py): {"timestamp"
//     (ISO 8601), "version", "dp_rank_count", "loads": [one object per DP
//     rank: GetLoadsReqOutput's core fields plus "num_total_reqs"],
//     "aggregate": {totals and averages}}. Query parameters (dp_rank,
//     include, format) are accepted and ignored: the mock answers the core
//     section of its single rank in JSON.
//   - GET /get_load (http_server.py, deprecated there in favour of
//     /v1/loads): [{"dp_rank", "num_reqs", "num_waiting_reqs", "num_tokens",
//     "num_pending_tokens", "ts_tic"}].
//
// What the mock counts: a prefill engine's running requests are those
// computing on a prefill slot (or, when prefills take no time, those in its
// batch), its waiting ones those queued for a slot or a batch place; a
// decode's running requests are its batch, its waiting ones those queued
// for the batch or still waiting for their KV. Tokens are the prompt tokens
// of those requests (a decode adds their output tokens): num_used_tokens for
// the running ones, num_total_tokens adding the queued ones.

// engineLoad is one sample of the load figures.
type engineLoad struct {
	running, waiting  int64
	usedTokens, total int64
	maxTokens         int64
	tokenUsage        float64
	hitRate           float64
	utilization       float64
}

func (e *Engine) load() engineLoad {
	var l engineLoad
	b, p := &e.sched, &e.prefillSlots
	if e.opts.Role == RolePrefill && e.computesPrefill() {
		l.running = p.inFlight.Load()
		l.usedTokens = p.heldTokens.Load()
		if slots := int64(e.opts.PrefillSlots); slots > 0 {
			l.utilization = float64(l.running) / float64(slots)
		}
	} else {
		l.running = b.inFlight.Load()
		l.usedTokens = b.heldTokens.Load()
		if e.opts.MaxBatch > 0 {
			l.utilization = float64(l.running) / float64(e.opts.MaxBatch)
		}
	}
	l.waiting = b.queued.Load() + p.queued.Load() + e.awaiting.Load()
	l.total = l.usedTokens + b.queuedTokens.Load() + p.queuedTokens.Load() + e.awaitingTokens.Load()
	l.maxTokens = int64(e.opts.KVCacheTokens)
	if l.maxTokens > 0 {
		l.tokenUsage = float64(l.usedTokens) / float64(l.maxTokens)
	}
	if in := e.stats.inputTokens.Load(); in > 0 {
		l.hitRate = float64(e.stats.cachedTokens.Load()) / float64(in)
	}
	return l
}

// serveLoads answers GET /v1/loads.
func (e *Engine) serveLoads(ctx *fasthttp.RequestCtx) {
	l := e.load()
	now := e.opts.Clock()
	b := append([]byte(nil), `{"timestamp":`...)
	b = appendString(b, now.UTC().Format("2006-01-02T15:04:05.000000-07:00"))
	b = append(b, `,"version":"mock","dp_rank_count":1,"loads":[{"dp_rank":0,"timestamp":`...)
	b = appendFloat(b, float64(now.UnixMicro())/1e6)
	b = append(b, `,"num_running_reqs":`...)
	b = appendInt(b, l.running)
	b = append(b, `,"num_waiting_reqs":`...)
	b = appendInt(b, l.waiting)
	b = append(b, `,"num_used_tokens":`...)
	b = appendInt(b, l.usedTokens)
	b = append(b, `,"num_total_tokens":`...)
	b = appendInt(b, l.total)
	b = append(b, `,"max_total_num_tokens":`...)
	b = appendInt(b, l.maxTokens)
	b = append(b, `,"token_usage":`...)
	b = appendFloat(b, round4(l.tokenUsage))
	b = append(b, `,"gen_throughput":`...)
	b = appendFloat(b, e.genThroughput())
	b = append(b, `,"cache_hit_rate":`...)
	b = appendFloat(b, round4(l.hitRate))
	b = append(b, `,"utilization":`...)
	b = appendFloat(b, round4(l.utilization))
	b = append(b, `,"max_running_requests":`...)
	b = appendInt(b, int64(e.opts.MaxBatch))
	b = append(b, `,"num_total_reqs":`...)
	b = appendInt(b, l.running+l.waiting)
	b = append(b, `}],"aggregate":{"total_running_reqs":`...)
	b = appendInt(b, l.running)
	b = append(b, `,"total_waiting_reqs":`...)
	b = appendInt(b, l.waiting)
	b = append(b, `,"total_reqs":`...)
	b = appendInt(b, l.running+l.waiting)
	b = append(b, `,"total_used_tokens":`...)
	b = appendInt(b, l.usedTokens)
	b = append(b, `,"total_tokens":`...)
	b = appendInt(b, l.total)
	b = append(b, `,"avg_token_usage":`...)
	b = appendFloat(b, round4(l.tokenUsage))
	b = append(b, `,"avg_throughput":`...)
	b = appendFloat(b, e.genThroughput())
	b = append(b, `,"avg_utilization":`...)
	b = appendFloat(b, round4(l.utilization))
	b = append(b, "}}"...)
	writeJSON(ctx, fasthttp.StatusOK, b)
}

// serveGetLoad answers the deprecated GET /get_load.
func (e *Engine) serveGetLoad(ctx *fasthttp.RequestCtx) {
	l := e.load()
	b := append([]byte(nil), `[{"dp_rank":0,"num_reqs":`...)
	b = appendInt(b, l.running+l.waiting)
	b = append(b, `,"num_waiting_reqs":`...)
	b = appendInt(b, l.waiting)
	b = append(b, `,"num_tokens":`...)
	b = appendInt(b, l.total)
	b = append(b, `,"num_pending_tokens":`...)
	b = appendInt(b, l.total-l.usedTokens)
	b = append(b, `,"ts_tic":`...)
	b = appendFloat(b, e.opts.Clock().Sub(e.started).Seconds())
	b = append(b, "}]"...)
	writeJSON(ctx, fasthttp.StatusOK, b)
}

func round4(v float64) float64 { return float64(int64(v*1e4+0.5)) / 1e4 }
