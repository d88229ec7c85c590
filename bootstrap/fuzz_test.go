package bootstrap

import (
	"encoding/json"
	"testing"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"pdlb"
	"pdlb/config"
)

// FuzzRouteHandlers drives a namespace's handler with arbitrary method,
// URI and body, against an empty, a half-registered or a ready namespace,
// with or without the write token. No input may panic or produce a 500;
// afterwards every read route must still answer sanely (a stored bad rank
// would show up there). Seeds: testdata/fuzz/FuzzRouteHandlers.
//
//	go test -run '^$' -fuzz FuzzRouteHandlers -fuzztime 60s ./bootstrap/
func FuzzRouteHandlers(f *testing.F) {
	f.Add("PUT", "/route", []byte(rankPUT(1, 0, 2, 1, "10.0.0.2", 17001, nil)), true, uint8(1))
	f.Add("GET", sentinelPath, []byte(nil), false, uint8(2))
	f.Add("POST", "/query_dp_ranks", []byte(`{"bootstrap_rooms":[1,"2"]}`), false, uint8(0))
	f.Fuzz(func(t *testing.T, method, uri string, body []byte, authorized bool, preload uint8) {
		reg := NewRegistry(defaulted(config.Bootstrap{AuthToken: "tok", ExtendedSentinel: preload&4 != 0}), zerolog.Nop(), pdlb.Clock{})
		h := reg.Handler(8998)
		reg.AddNamespace(8998)
		ns := reg.namespace(8998)
		for i := 0; i < int(preload%3); i++ { // 0: empty, 1: 1 of 2, 2: ready
			r, err := parseRegistration([]byte(rankPUT(1, 0, 1, 0, "10.0.0.1", 17000+i, map[string]any{"system_dp_size": 2, "system_dp_rank": i})))
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := ns.register(r, false); err != nil {
				t.Fatal(err)
			}
		}
		serve := func(method, uri string, body []byte) *fasthttp.RequestCtx {
			var ctx fasthttp.RequestCtx
			ctx.Request.Header.SetMethod(method)
			ctx.Request.SetRequestURI(uri)
			ctx.Request.SetBody(body)
			if authorized {
				ctx.Request.Header.Set("Authorization", "Bearer tok")
			}
			h(&ctx)
			if c := ctx.Response.StatusCode(); c >= 500 && c != fasthttp.StatusServiceUnavailable {
				t.Fatalf("%s %q body %q → %d %q", method, uri, body, c, ctx.Response.Body())
			}
			return &ctx
		}
		serve(method, uri, body)
		for _, q := range []string{sentinelPath, "/route?engine_rank=-1&target_dp_group=-1", "/route?engine_rank=-1&target_dp_group=-1&target_pp_rank=-1",
			"/route?engine_rank=-1&prefill_dp_rank=-1&target_pp_rank=-1", rankPath(0, 0, 0, 0), rankPath(1, 0, 0, 0)} {
			ctx := serve("GET", q, nil)
			if ctx.Response.StatusCode() == fasthttp.StatusOK && !json.Valid(ctx.Response.Body()) {
				t.Fatalf("GET %s → invalid JSON %q", q, ctx.Response.Body())
			}
		}
		if reg, exp := ns.state.registered.Load(), ns.state.expected.Load(); reg > exp || (ns.state.ready() != (exp > 0 && reg == exp)) {
			t.Fatalf("inconsistent readiness: %d of %d, ready=%v", reg, exp, ns.state.ready())
		}
	})
}
