package bootstrap

import (
	"encoding/json"
	"maps"
	"net"
	"testing"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"pdlb"
	"pdlb/config"
)

// FuzzRouteHandlers drives a namespace's handler with arbitrary method,
// URI and body, against an empty, a half-registered or a ready namespace,
// under one of four write policies. No input may panic or produce a 500;
// afterwards every read route must still answer sanely (a stored bad rank
// would show up there), and the policy must have held. Seeds:
// testdata/fuzz/FuzzRouteHandlers.
//
// preload%3 picks the namespace, bit 2 extended_sentinel, bits 3–4 the
// policy and the TCP peer:
//
//	0: auth_token, no IP peer (authorized sends the token)
//	1: open registry, peer 192.0.2.7: no preloaded rank may move or vanish
//	2: allowed_sources 10.0.0.0/8, peer 192.0.2.7: nothing may change
//	3: allowed_sources 10.0.0.0/8, peer 10.0.0.9
//
//	go test -run '^$' -fuzz FuzzRouteHandlers -fuzztime 60s ./bootstrap/
func FuzzRouteHandlers(f *testing.F) {
	f.Add("PUT", "/route", []byte(rankPUT(1, 0, 2, 1, "10.0.0.2", 17001, nil)), true, uint8(1))
	f.Add("GET", sentinelPath, []byte(nil), false, uint8(2))
	f.Add("POST", "/query_dp_ranks", []byte(`{"bootstrap_rooms":[1,"2"]}`), false, uint8(0))
	moved := []byte(rankPUT(1, 0, 1, 0, "10.6.6.6", 17000, map[string]any{"system_dp_size": 2, "system_dp_rank": 0}))
	f.Add("PUT", "/route", moved, false, uint8(8))          // open, ready: a move is refused
	f.Add("DELETE", "/route", []byte(nil), false, uint8(8)) // open, from afar: refused
	f.Add("PUT", "/route", moved, false, uint8(17))         // outside allowed_sources
	f.Add("POST", "/register_dp_rank", []byte(`{"bootstrap_room":1,"dp_rank":0}`), false, uint8(17))
	f.Add("PUT", "/route", moved, false, uint8(26)) // inside allowed_sources: the move is taken
	f.Fuzz(func(t *testing.T, method, uri string, body []byte, authorized bool, preload uint8) {
		cfg := config.Bootstrap{ExtendedSentinel: preload&4 != 0}
		policy := preload >> 3 & 3
		var peer net.Addr
		switch policy {
		case 0:
			cfg.AuthToken = "tok"
		case 1:
			peer = &net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 40000}
		case 2, 3:
			cfg.AllowedSources = []string{"10.0.0.0/8"}
			peer = &net.TCPAddr{IP: net.ParseIP(map[uint8]string{2: "192.0.2.7", 3: "10.0.0.9"}[policy]), Port: 40000}
		}
		reg := NewRegistry(defaulted(cfg), zerolog.Nop(), pdlb.Clock{})
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
		ranks := func() map[rankKey]RankInfo {
			ns.mu.RLock()
			defer ns.mu.RUnlock()
			return maps.Clone(ns.st.ranks)
		}
		before, registered := ranks(), ns.state.registered.Load()
		serve := func(method, uri string, body []byte) *fasthttp.RequestCtx {
			var ctx fasthttp.RequestCtx
			ctx.SetRemoteAddr(peer)
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
		after := ranks()
		switch policy {
		case 1:
			for k, ri := range before {
				if now, ok := after[k]; !ok || !sameHost(now.RankIP, ri.RankIP) {
					t.Fatalf("%s %q from afar in an open registry: rank %+v went from %+v to %+v (present %v)", method, uri, k, ri, now, ok)
				}
			}
		case 2:
			if !maps.Equal(before, after) || ns.state.registered.Load() != registered {
				t.Fatalf("%s %q from outside allowed_sources changed the ranks: %v → %v", method, uri, before, after)
			}
		}
	})
}
