package load

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/valyala/fasthttp"
)

func TestClosedLoopSendsExactlyRequests(t *testing.T) {
	var hits atomic.Int64
	next := engine(0)
	url := serve(t, func(ctx *fasthttp.RequestCtx) {
		hits.Add(1)
		next(ctx)
	})
	rep, err := Run(context.Background(), Options{
		Targets: []string{url}, Concurrency: 7, Requests: 250,
		OutputLen: Dist{10, 20}, InputLen: Dist{5, 5},
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := hits.Load(); n != 250 {
		t.Errorf("server saw %d requests, want exactly 250", n)
	}
	r := rep.Targets[0].Rounds[0]
	if r.Completed != 250 || r.Failed != 0 || r.Latency.Count != 250 {
		t.Errorf("completed=%d failed=%d samples=%d, want 250/0/250", r.Completed, r.Failed, r.Latency.Count)
	}
	// Tokens come from meta_info.completion_tokens, which echoes max_new_tokens in [10, 20].
	if r.OutputTokens < 2500 || r.OutputTokens > 5000 {
		t.Errorf("output tokens = %d, want within [2500, 5000]", r.OutputTokens)
	}
	if r.ReqPerSec <= 0 || r.TokensPerSec <= 0 || r.Latency.P50 <= 0 {
		t.Errorf("throughput/latency not measured: %+v", r)
	}
	if len(rep.Targets[0].Rounds) != 1 || rep.Config.Rounds != 1 {
		t.Errorf("one target should run one round by default, got %d", len(rep.Targets[0].Rounds))
	}
}

func TestOptionsRejected(t *testing.T) {
	for name, o := range map[string]Options{
		"no target":       {},
		"bad route":       {Targets: []string{"http://127.0.0.1:1"}, Route: "/x"},
		"both stop rules": {Targets: []string{"http://127.0.0.1:1"}, Requests: 1, Duration: 1},
		"pid count":       {Targets: []string{"http://127.0.0.1:1"}, PIDs: []int{1, 2}},
		"bad url":         {Targets: []string{"127.0.0.1:1"}},
	} {
		if _, err := Run(context.Background(), o); err == nil {
			t.Errorf("%s: Run accepted %+v", name, o)
		}
	}
}
