package proxy

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"pdlb/proxy/proxytest"
)

func TestDPRankLoad(t *testing.T) {
	b := mustBackend(t, "http://127.0.0.1:1", Decode)
	tk, _ := b.Acquire()
	if b.DPSize() != 0 || tk.TakeLeastLoadedDPRank(0) != -1 || b.DPInFlight() != nil {
		t.Fatal("a backend of unknown DP size reports ranks")
	}
	tk.Release()
	b.SetDPSize(3)
	var tickets []Ticket
	for want := range []int{0, 1, 2, 0} { // the least loaded, lowest first
		tk, _ := b.Acquire()
		if got := tk.TakeLeastLoadedDPRank(3); got != []int{0, 1, 2, 0}[want] {
			t.Fatalf("request %d took rank %d", want, got)
		}
		tickets = append(tickets, tk)
	}
	if got := b.DPInFlight(); !slices.Equal(got, []int64{2, 1, 1}) {
		t.Fatalf("in flight per rank %v, want [2 1 1]", got)
	}
	tickets[1].Done(nil) // rank 1 settles
	tk, _ = b.Acquire()
	if r := tk.TakeLeastLoadedDPRank(3); r != 1 {
		t.Fatalf("least loaded rank %d, want 1", r)
	}
	tk.Release()
	tickets[0].Release()
	tickets[2].Done(nil)
	tickets[3].Done(nil)
	if got := b.DPInFlight(); !slices.Equal(got, []int64{0, 0, 0}) {
		t.Fatalf("in flight per rank after settling %v", got)
	}
	tk, _ = b.Acquire()
	if r := tk.TakeLeastLoadedDPRank(2); r != -1 {
		t.Fatalf("a rank (%d) taken for size 2 from a backend of size 3", r)
	}
	tk.Release()
	b.SetDPSize(3) // same size: counters kept
	b.SetDPSize(0) // not a size: ignored
	if b.DPSize() != 3 {
		t.Fatalf("DP size %d", b.DPSize())
	}
}

// Requests that learn the DP size and choose their ranks at once are all
// counted, spread evenly: each used to store counters of its own (the
// requests counted on those replaced vanished from the balance), and two
// choosing together took the same least-loaded rank.
func TestDPRanksUnderConcurrency(t *testing.T) {
	const ranks, requests = 4, 100
	// A race shows in some rounds only: many short rounds, each a new
	// backend whose first requests learn its size together.
	for round := range 1000 {
		b := mustBackend(t, "http://127.0.0.1:1", Prefill)
		start := make(chan struct{})
		var wg sync.WaitGroup
		tickets := make([]Ticket, requests)
		for i := range requests {
			wg.Go(func() {
				<-start
				tickets[i], _ = b.Acquire()
				b.SetDPSize(ranks) // as the router does for every prefill request
				if r := tickets[i].TakeLeastLoadedDPRank(ranks); r < 0 || r >= ranks {
					t.Errorf("rank %d", r)
				}
			})
		}
		close(start)
		wg.Wait()
		if got := b.DPInFlight(); !slices.Equal(got, []int64{requests / ranks, requests / ranks, requests / ranks, requests / ranks}) {
			t.Fatalf("round %d: in flight per rank %v, want %d on each", round, got, requests/ranks)
		}
		for _, tk := range tickets {
			tk.Release()
		}
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
