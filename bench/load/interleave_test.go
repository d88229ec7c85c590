package load

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/valyala/fasthttp"
)

func TestTargetsInterleaveInRounds(t *testing.T) {
	var mu sync.Mutex
	var order strings.Builder
	recorder := func(name string) fasthttp.RequestHandler {
		next := engine(0)
		return func(ctx *fasthttp.RequestCtx) {
			mu.Lock()
			order.WriteString(name)
			mu.Unlock()
			next(ctx)
		}
	}
	a, b := serve(t, recorder("A")), serve(t, recorder("B")) // default: 3 rounds each
	rep, err := Run(context.Background(), Options{Targets: []string{a, b}, Requests: 2, Concurrency: 1, OutputLen: Dist{1, 1}})
	if err != nil {
		t.Fatal(err)
	}
	// Rotated: each target opens a round in turn.
	if got, want := order.String(), "AABBBBAAAABB"; got != want {
		t.Errorf("servers saw %q, want %q", got, want)
	}
	for i, tr := range rep.Targets {
		if len(tr.Rounds) != 3 {
			t.Fatalf("target %d ran %d rounds, want 3", i, len(tr.Rounds))
		}
		for j, r := range tr.Rounds {
			if r.Round != j || r.Completed != 2 {
				t.Errorf("target %d round %d: %+v", i, j, r)
			}
		}
		if tr.Median.Completed != 2 {
			t.Errorf("target %d median completed = %d", i, tr.Median.Completed)
		}
	}
}
