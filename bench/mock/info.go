package mock

import (
	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
)

// Health, info and admin routes, answered like an SGLang engine would.

// serveHealth answers /health and /health_generate: 200 with an empty body,
// 503 while starting (SlowStart) or shutting down.
func (e *Engine) serveHealth(ctx *fasthttp.RequestCtx) {
	if e.starting() || e.ctx.Err() != nil {
		ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
		return
	}
	ctx.SetStatusCode(fasthttp.StatusOK)
}

// serveServerInfo answers /server_info (and /get_server_info): some engine
// args, then per-DP internal_states as the mini LB aggregates them.
func (e *Engine) serveServerInfo(ctx *fasthttp.RequestCtx) {
	b := append([]byte(nil), `{"model_path":`...)
	b = appendString(b, e.opts.Model)
	b = append(b, `,"served_model_name":`...)
	b = appendString(b, e.opts.Model)
	b = append(b, `,"disaggregation_mode":`...)
	b = appendString(b, e.opts.Role)
	b = append(b, `,"disaggregation_transfer_backend":"mock","disaggregation_bootstrap_port":8998`...)
	b = append(b, `,"tp_size":1,"dp_size":1,"pp_size":1,"page_size":1,"kv_cache_dtype":"auto"`...)
	b = append(b, `,"max_running_requests":`...)
	b = appendInt(b, int64(e.opts.MaxBatch))
	// server_args carry the keys, as SGLang's dataclasses.asdict does (newer
	// versions null them): what relays this route must not pass them on.
	for _, k := range []struct{ name, val string }{{"api_key", e.opts.APIKey}, {"admin_api_key", e.opts.AdminAPIKey}} {
		b = append(b, `,"`+k.name+`":`...)
		if k.val == "" {
			b = append(b, "null"...)
		} else {
			b = appendString(b, k.val)
		}
	}
	b = append(b, `,"internal_states":[{"last_gen_throughput":`...)
	b = appendFloat(b, e.genThroughput())
	b = append(b, `,"avg_spec_accept_length":null}],"version":"mock"}`...)
	writeJSON(ctx, fasthttp.StatusOK, b)
}

// genThroughput is output tokens per second since start (a mock's stand-in
// for the engine's recent decode throughput).
func (e *Engine) genThroughput() float64 {
	s := e.opts.Clock().Sub(e.started).Seconds()
	if s <= 0 {
		return 0
	}
	return float64(int64(float64(e.stats.outputTokens.Load())/s*100)) / 100
}

// serveModelInfo answers /model_info (and /get_model_info).
func (e *Engine) serveModelInfo(ctx *fasthttp.RequestCtx) {
	b := append([]byte(nil), `{"model_path":`...)
	b = appendString(b, e.opts.Model)
	b = append(b, `,"tokenizer_path":`...)
	b = appendString(b, e.opts.Model)
	b = append(b, `,"is_generation":true,"preferred_sampling_params":null,"weight_version":"default"}`...)
	writeJSON(ctx, fasthttp.StatusOK, b)
}

// serveModels answers GET /v1/models (OpenAI model list).
func (e *Engine) serveModels(ctx *fasthttp.RequestCtx) {
	b := append([]byte(nil), `{"object":"list","data":[{"id":`...)
	b = appendString(b, e.opts.Model)
	b = append(b, `,"object":"model","created":`...)
	b = appendInt(b, e.started.Unix())
	b = append(b, `,"owned_by":"sglang","root":`...)
	b = appendString(b, e.opts.Model)
	b = append(b, `,"max_model_len":32768}]}`...)
	writeJSON(ctx, fasthttp.StatusOK, b)
}

// serveFlushCache empties the KV cache and answers /flush_cache with
// SGLang's text. (SGLang refuses while requests run; the mock flushes.)
func (e *Engine) serveFlushCache(ctx *fasthttp.RequestCtx) {
	e.FlushCache()
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType("text/plain; charset=utf-8")
	ctx.SetBodyString("Cache flushed.\nPlease check backend logs for more details. " +
		"(When there are running or waiting requests, the operation will not be performed.)\n")
}

// serveAbort answers POST /abort_request {"rid": …}: it records the rid and
// ends the in-flight request with that rid (queued, stalled or streaming).
func (e *Engine) serveAbort(ctx *fasthttp.RequestCtx) {
	if e.opts.NoAbortRoute {
		ctx.Error(`{"detail":"Not Found"}`, fasthttp.StatusNotFound)
		return
	}
	rid := gjson.GetBytes(ctx.PostBody(), "rid").String()
	e.stats.addAborted(rid)
	if rid != "" {
		e.abortRid(rid)
	}
	ctx.SetStatusCode(fasthttp.StatusOK)
}
