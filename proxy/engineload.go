package proxy

import (
	"time"

	"github.com/tidwall/gjson"
)

// EngineLoad is the engine's own count of the requests it runs and queues,
// as its load route last said (policy.power_of_two.engine_load), or -1
// while unknown. It sees what pdlb's in-flight count cannot: requests sent
// by other balancers, or by other pdlb replicas.
func (b *Backend) EngineLoad() int64 { return b.engineLoad.Load() }

// learnEngineLoad reads an engine's running and waiting requests: SGLang's
// GET /v1/loads (aggregate.total_running_reqs + total_waiting_reqs), or the
// older GET /get_load (a list per DP rank of num_reqs, num_waiting_reqs).
// An engine that answers neither stays unknown.
func learnEngineLoad(b *Backend, timeout time.Duration) {
	if res, err := b.Call("GET", "/v1/loads", nil, timeout); err == nil && res.Status == 200 {
		agg := gjson.GetBytes(res.Body, "aggregate")
		running, waiting := agg.Get("total_running_reqs"), agg.Get("total_waiting_reqs")
		if running.Exists() && waiting.Exists() {
			b.engineLoad.Store(running.Int() + waiting.Int())
			return
		}
	}
	res, err := b.Call("GET", "/get_load", nil, timeout)
	if err != nil || res.Status != 200 {
		b.engineLoad.Store(-1)
		return
	}
	ranks := gjson.ParseBytes(res.Body)
	if !ranks.IsArray() {
		b.engineLoad.Store(-1)
		return
	}
	var n int64
	ranks.ForEach(func(_, r gjson.Result) bool {
		n += r.Get("num_reqs").Int() + r.Get("num_waiting_reqs").Int()
		return true
	})
	b.engineLoad.Store(n)
}
