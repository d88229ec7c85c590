package load

import (
	"context"
	"pdlb/proxy/proxytest"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

func TestErrorClasses(t *testing.T) {
	unavailable := serve(t, func(ctx *fasthttp.RequestCtx) {
		ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
		ctx.WriteString(`{"error":{"message":"not ready","code":503}}`)
	})
	garbage := serve(t, func(ctx *fasthttp.RequestCtx) { ctx.WriteString("<html>oops") })
	stall := make(chan struct{})
	stalled := serve(t, func(ctx *fasthttp.RequestCtx) { <-stall })
	t.Cleanup(func() { close(stall) }) // runs before the server's Shutdown, which waits for handlers

	// Nothing listens there, so connects are refused.
	closed := "http://" + proxytest.ClosedAddr(t)

	for _, tc := range []struct {
		name, url, class string
	}{
		{"503", unavailable, "status_503"},
		{"closed port", closed, ErrConnection},
		{"stall", stalled, ErrTimeout},
		{"not json", garbage, ErrBadBody},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := Run(context.Background(), Options{
				Targets: []string{tc.url}, Requests: 4, Concurrency: 2, Timeout: 150 * time.Millisecond,
			})
			if err != nil {
				t.Fatal(err)
			}
			r := rep.Targets[0].Rounds[0]
			if r.Errors[tc.class] != 4 || r.Failed != 4 || r.Completed != 0 {
				t.Errorf("errors = %v (failed %d, completed %d), want 4 × %s", r.Errors, r.Failed, r.Completed, tc.class)
			}
		})
	}
}
