package bootstrap

import (
	"testing"

	"pdlb/config"
)

// With bootstrap.allowed_sources set, every write from a TCP peer outside
// it is a 403 in pdlb's error shape and stores nothing; reads stay open to
// everyone, because decodes read from wherever they run.
func TestAllowedSourcesRefuseOtherPeers(t *testing.T) {
	e := startRegistry(t, config.Bootstrap{AllowedSources: []string{"10.0.0.0/8", "127.0.0.0/31"}})
	in, out := e.from(t, "127.0.0.1"), e.from(t, "127.0.0.2")

	// dp=2: rank 0 from the allowed peer, rank 1 still missing.
	dp0 := rankPUT(1, 0, 2, 0, "10.0.0.1", 17000, map[string]any{"kv_cache_dtype": nil})
	mustStatus(t, "PUT from allowed peer", in.do(t, "PUT", "/route", dp0), 200)
	mustStatus(t, "register_dp_rank from allowed peer", in.do(t, "POST", "/register_dp_rank", `{"bootstrap_room":1,"dp_rank":0}`), 200)

	for _, w := range []struct{ what, method, path, body string }{
		{"new rank", "PUT", "/route", rankPUT(1, 0, 2, 1, "10.0.0.2", 17001, nil)},
		{"rank 0 moved", "PUT", "/route", rankPUT(1, 0, 2, 0, "10.6.6.6", 17000, nil)},
		{"rank 0 restarted", "PUT", "/route", rankPUT(1, 0, 2, 0, "10.0.0.1", 17009, nil)},
		{"DP rank", "POST", "/register_dp_rank", `{"bootstrap_room":1,"dp_rank":1}`},
		{"reset", "DELETE", "/route", ""},
	} {
		// A header naming an allowed host changes nothing: only the TCP peer counts.
		r := out.do(t, w.method, w.path, w.body, "X-Forwarded-For", "127.0.0.1", "X-Real-IP", "127.0.0.1")
		mustStatus(t, w.what+" from 127.0.0.2", r, 403)
		mustContain(t, w.what+" from 127.0.0.2", r.body, `"type":"permission_error"`, `"code":403`, "bootstrap.allowed_sources", "127.0.0.2")
		keysOf(t, r.body)
	}

	// Nothing the refused writes carried was stored.
	if reg, exp := e.reg.Status(e.addr); reg != 1 || exp != 2 {
		t.Fatalf("after refused writes: %d of %d registered, want 1 of 2", reg, exp)
	}
	r := out.do(t, "GET", sentinelPath, "")
	mustStatus(t, "sentinel from 127.0.0.2", r, 503)
	mustContain(t, "sentinel from 127.0.0.2", r.body, "1 of 2")
	mustStatus(t, "health from 127.0.0.2", out.do(t, "GET", "/health", ""), 200)

	mustStatus(t, "PUT rank 1 from allowed peer", in.do(t, "PUT", "/route", rankPUT(1, 0, 2, 1, "10.0.0.2", 17001, map[string]any{"kv_cache_dtype": nil})), 200)
	r = out.do(t, "GET", rankPath(0, 0, 0, 0), "")
	mustStatus(t, "rank 0 from 127.0.0.2", r, 200)
	if r.body != `{"rank_ip":"10.0.0.1","rank_port":17000}` {
		t.Fatalf("rank 0 = %s, want the allowed peer's registration", r.body)
	}
	r = out.do(t, "GET", sentinelPath, "")
	mustStatus(t, "ready sentinel from 127.0.0.2", r, 200)
	mustContain(t, "ready sentinel", r.body, `"kv_cache_dtype":null`) // the refused PUTs' "auto" was not absorbed
	r = out.do(t, "POST", "/query_dp_ranks", `{"bootstrap_rooms":[1]}`)
	mustStatus(t, "query_dp_ranks from 127.0.0.2", r, 200)
	if r.body != `{"1":0}` {
		t.Fatalf("query_dp_ranks = %s, want the allowed peer's entry", r.body)
	}

	mustStatus(t, "DELETE from allowed peer", in.do(t, "DELETE", "/route", ""), 200)
	mustStatus(t, "sentinel after reset", out.do(t, "GET", sentinelPath, ""), 503)
}

// The source is checked before the token: a peer that may not write is
// refused even with the right token, and learns nothing about it.
func TestAllowedSourcesBeforeToken(t *testing.T) {
	e := startRegistry(t, config.Bootstrap{AuthToken: "s3cret", AllowedSources: []string{"127.0.0.1"}})
	put := rankPUT(1, 0, 1, 0, "10.0.0.1", 17000, nil)
	r := e.from(t, "127.0.0.2").do(t, "PUT", "/route", put, "Authorization", "Bearer s3cret")
	mustStatus(t, "right token, wrong source", r, 403)
	mustStatus(t, "right source, no token", e.do(t, "PUT", "/route", put), 401)
	mustStatus(t, "right source, right token", e.do(t, "PUT", "/route", put, "Authorization", "Bearer s3cret"), 200)
}

// Peers and entries meet in one form: an IPv4 peer reported as
// ::ffff:a.b.c.d (a dual-stack listener) matches IPv4 entries, and an
// IPv4-mapped entry matches IPv4 peers.
func TestAllowedSourcesMatchEitherIPv4Form(t *testing.T) {
	e := startRegistryInMemory(t, config.Bootstrap{AllowedSources: []string{"10.0.0.0/8", "::ffff:172.16.0.0/108", "fd00::/8"}})
	for _, c := range []struct {
		peer string
		want int
	}{
		{"10.0.0.5", 200},
		{"::ffff:10.0.0.5", 200},
		{"172.16.3.4", 200},
		{"fd00::5", 200},
		{"192.0.2.7", 403},
		{"::ffff:192.0.2.7", 403},
		{"fe80::1", 403},
		{"127.0.0.1", 403}, // loopback is not special once a list is set
	} {
		r := e.from(t, c.peer).do(t, "POST", "/register_dp_rank", `{"bootstrap_room":1,"dp_rank":0}`)
		mustStatus(t, "write from "+c.peer, r, c.want)
	}
}

// An entry Validate would refuse (a caller that skipped it) admits nobody:
// a typo narrows who may write instead of opening the registry.
func TestUnreadableSourceAdmitsNobody(t *testing.T) {
	e := startRegistry(t, config.Bootstrap{AllowedSources: []string{"localhost"}})
	mustStatus(t, "PUT from 127.0.0.1", e.do(t, "PUT", "/route", rankPUT(1, 0, 1, 0, "10.0.0.1", 17000, nil)), 403)
}
