package etcdstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"pdlb"
	"pdlb/bootstrap"
	"pdlb/bootstrap/etcdstore/etcdtest"
	"pdlb/config"
)

// BenchmarkRouteLookup holds the claim that a registry kept in etcd answers
// lookups from its local copy, as fast as a registry of its own: GET /route
// (the sentinel and one rank, as a decode asks) and Ready (what the request
// path asks per prefill), on a registry of 8 ranks, local and in etcd.
//
//	go test ./bootstrap/etcdstore -run '^$' -bench RouteLookup -benchmem
func BenchmarkRouteLookup(b *testing.B) {
	for _, store := range []string{"local", "etcd"} {
		b.Run(store, func(b *testing.B) {
			reg := bootstrap.NewRegistry(config.Default().Bootstrap, zerolog.Nop(), pdlb.SystemClock())
			if store == "etcd" {
				e := etcdtest.Start(b, "127.0.0.1")
				cfg := config.Default().Cluster.Etcd
				cfg.Endpoints = []string{e.Endpoint()}
				cli, err := Connect(cfg)
				if err != nil {
					b.Fatal(err)
				}
				s := NewRegistry(cli, "/bench/", reg, zerolog.Nop())
				reg.SetStore(s, 5*time.Second)
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() { defer close(done); s.Mirror(ctx) }()
				b.Cleanup(func() { cancel(); <-done; cli.Close() })
			}
			reg.AddNamespace(testPort)
			h := reg.Handler(testPort)
			for tp := range 8 {
				var ctx fasthttp.RequestCtx
				ctx.Request.Header.SetMethod("PUT")
				ctx.Request.SetRequestURI("/route")
				ctx.Request.SetBodyString(rankBody(8, tp, "10.0.0.1", 17000+tp))
				h(&ctx)
				if ctx.Response.StatusCode() != 200 {
					b.Fatalf("PUT rank %d: %d %s", tp, ctx.Response.StatusCode(), ctx.Response.Body())
				}
			}
			addr := "127.0.0.1:" + strconv.Itoa(testPort)
			for _, q := range []struct{ name, uri string }{
				{"sentinel", sentinel},
				{"rank", "/route?prefill_dp_rank=0&prefill_cp_rank=0&target_tp_rank=5&target_pp_rank=0"},
			} {
				b.Run(q.name, func(b *testing.B) {
					var ctx fasthttp.RequestCtx
					ctx.Request.Header.SetMethod("GET")
					ctx.Request.SetRequestURI(q.uri)
					b.ReportAllocs()
					for b.Loop() {
						ctx.Response.Reset()
						h(&ctx)
						if ctx.Response.StatusCode() != 200 {
							b.Fatal(ctx.Response.StatusCode())
						}
					}
				})
			}
			b.Run("ready", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if !reg.Ready(addr) {
						b.Fatal("not ready")
					}
				}
			})
		})
	}
}
