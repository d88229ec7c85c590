package proxy

import (
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"pdlb/proxy/proxytest"
)

func TestLearnEngineLoad(t *testing.T) {
	cases := []struct {
		name    string
		handler fasthttp.RequestHandler
		want    int64
	}{
		{"v1/loads", proxytest.JSONAnswer(200, `{"aggregate":{"total_running_reqs":4,"total_waiting_reqs":5},"loads":[]}`), 9},
		{"get_load, summed over DP ranks", func(ctx *fasthttp.RequestCtx) {
			if string(ctx.Path()) != "/get_load" {
				ctx.SetStatusCode(404)
				return
			}
			proxytest.JSONAnswer(200, `[{"dp_rank":0,"num_reqs":2,"num_waiting_reqs":1},{"dp_rank":1,"num_reqs":3,"num_waiting_reqs":0}]`)(ctx)
		}, 6},
		{"neither", func(ctx *fasthttp.RequestCtx) { ctx.SetStatusCode(404) }, -1},
		{"not JSON", func(ctx *fasthttp.RequestCtx) {
			if string(ctx.Path()) == "/get_load" {
				ctx.SetBodyString("busy")
				return
			}
			ctx.SetStatusCode(404)
		}, -1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := mustBackend(t, proxytest.NewEngine(t, c.handler).URL, Prefill)
			if b.EngineLoad() != -1 {
				t.Fatal("a new backend's engine load is known")
			}
			learnEngineLoad(b, time.Second)
			if got := b.EngineLoad(); got != c.want {
				t.Fatalf("engine load %d, want %d", got, c.want)
			}
		})
	}
}
