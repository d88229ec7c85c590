package proxy

import (
	"slices"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"pdlb/proxy/proxytest"
)

func TestDPRankLoad(t *testing.T) {
	b := mustBackend(t, "http://127.0.0.1:1", Decode)
	if b.DPSize() != 0 || b.LeastLoadedDPRank() != -1 || b.DPInFlight() != nil {
		t.Fatal("a backend of unknown DP size reports ranks")
	}
	tk, _ := b.Acquire()
	tk.TakeDPRank(0) // unknown size: counts nothing
	tk.Release()
	b.SetDPSize(3)
	var tickets []Ticket
	for range 4 { // ranks 0, 1, 2, then 0 again: the least loaded, lowest first
		tk, _ := b.Acquire()
		tk.TakeDPRank(b.LeastLoadedDPRank())
		tickets = append(tickets, tk)
	}
	if got := b.DPInFlight(); !slices.Equal(got, []int64{2, 1, 1}) {
		t.Fatalf("in flight per rank %v, want [2 1 1]", got)
	}
	tickets[1].Done(nil) // rank 1 settles
	if r := b.LeastLoadedDPRank(); r != 1 {
		t.Fatalf("least loaded rank %d, want 1", r)
	}
	tickets[0].Release()
	tickets[2].Done(nil)
	tickets[3].Done(nil)
	if got := b.DPInFlight(); !slices.Equal(got, []int64{0, 0, 0}) {
		t.Fatalf("in flight per rank after settling %v", got)
	}
	b.SetDPSize(3) // same size: counters kept
	b.SetDPSize(0) // not a size: ignored
	if b.DPSize() != 3 {
		t.Fatalf("DP size %d", b.DPSize())
	}
}

func TestLearnDPSizeFromServerInfo(t *testing.T) {
	e := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{"internal_states":[{"a":1},{"a":2},{"a":3},{"a":4}]}`))
	b := mustBackend(t, e.URL, Decode)
	learnDPSize(b, time.Second)
	if b.DPSize() != 4 {
		t.Fatalf("DP size %d, want 4 from internal_states", b.DPSize())
	}
	// An engine older than 2026-04 answers /get_server_info only.
	old := proxytest.NewEngine(t, func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) != "/get_server_info" {
			ctx.SetStatusCode(404)
			return
		}
		proxytest.JSONAnswer(200, `{"internal_states":[{},{}]}`)(ctx)
	})
	ob := mustBackend(t, old.URL, Decode)
	learnDPSize(ob, time.Second)
	if ob.DPSize() != 2 {
		t.Fatalf("DP size %d from /get_server_info, want 2", ob.DPSize())
	}
}
