package router

import (
	"net"
	"testing"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"pdlb/config"
	"pdlb/proxy/proxytest"
)

// BenchmarkRequestAborts runs a whole non-streamed /generate that completes
// normally through the Router's handler against loopback engines, with
// aborts off (no rid written), on with pdlb's own rid, and on with the
// client's: what the rid costs a request that never needs an abort.
// allocs/op counts the whole process (pdlb and the in-process engines).
//
//	go test ./router -run '^$' -bench RequestAborts -benchmem -count 5
func BenchmarkRequestAborts(b *testing.B) {
	p := proxytest.NewEngine(b, proxytest.JSONAnswer(200, `{"text":"","meta_info":{}}`))
	d := proxytest.NewEngine(b, proxytest.JSONAnswer(200, `{"text":"hello","meta_info":{"completion_tokens":1}}`))
	const body = `{"text":"The quick brown fox jumps over the lazy dog","sampling_params":{"max_new_tokens":16}`
	for _, tc := range []struct {
		name, body string
		on         bool
	}{
		{"off", body + `}`, false},
		{"own-rid", body + `}`, true},
		{"client-rid", body + `,"rid":"client-request-0001"}`, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			l := startLBFull(b, []*proxytest.Engine{p}, []*proxytest.Engine{d}, Options{Log: zerolog.Nop()}, func(c *config.Config) {
				c.Abort = config.Abort{Enabled: tc.on, Timeout: config.Default().Abort.Timeout, MaxInFlight: 256}
			})
			var req fasthttp.Request
			req.Header.SetMethod(fasthttp.MethodPost)
			req.SetRequestURI("/generate")
			req.Header.SetContentType("application/json")
			req.SetBodyString(tc.body)
			var ctx fasthttp.RequestCtx
			ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}, nil)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				ctx.Response.Reset()
				l.router.Handler(&ctx)
				if ctx.Response.StatusCode() != 200 {
					b.Fatalf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
				}
			}
		})
	}
}
