package bootstrap

import (
	"testing"

	"pdlb/config"
)

// In an open registry (no auth_token, no allowed_sources) anyone who
// reaches the port may register, as with SGLang, but a registered rank may
// not be moved to another host: decodes would pull its KV from wherever the
// last writer said. The refused PUT is a 409 that says what would allow the
// move, and changes nothing.
func TestMoveRefusedInOpenRegistry(t *testing.T) {
	e := startRegistry(t, config.Bootstrap{})
	mustStatus(t, "PUT", e.do(t, "PUT", "/route", rankPUT(1, 0, 1, 0, "10.0.0.1", 17000, map[string]any{"kv_cache_dtype": nil})), 200)
	mustStatus(t, "ready", e.do(t, "GET", sentinelPath, ""), 200)

	r := e.do(t, "PUT", "/route", rankPUT(1, 0, 1, 0, "10.6.6.6", 17000, map[string]any{"kv_cache_dtype": "fp8_e5m2"}))
	mustStatus(t, "move to 10.6.6.6", r, 409)
	mustContain(t, "409 body", r.body, `"code":409`, "dp=0 cp=0 tp=0 pp=0", "10.0.0.1:17000", "10.6.6.6:17000",
		"bootstrap.auth_token", "bootstrap.allowed_sources", "DELETE /route")
	keysOf(t, r.body)
	mustStatus(t, "move to an IPv6 host", e.do(t, "PUT", "/route", rankPUT(1, 0, 1, 0, "fd00::6", 17000, nil)), 409)

	r = e.do(t, "GET", rankPath(0, 0, 0, 0), "")
	mustStatus(t, "rank 0 after refused moves", r, 200)
	if r.body != `{"rank_ip":"10.0.0.1","rank_port":17000}` {
		t.Fatalf("rank 0 = %s, want the first registration", r.body)
	}
	r = e.do(t, "GET", sentinelPath, "")
	mustContain(t, "sentinel after refused move", r.body, `"kv_cache_dtype":null`) // the refused PUT's dtype was not absorbed
	if reg, exp := e.reg.Status(e.addr); reg != 1 || exp != 1 {
		t.Fatalf("after refused moves: %d of %d", reg, exp)
	}
}

// A rank restarted on its host registers again with a new ZMQ port (SGLang
// binds a random one per start): that is taken, in any spelling of the
// same address.
func TestRestartInPlaceAccepted(t *testing.T) {
	e := startRegistry(t, config.Bootstrap{})
	for _, c := range []struct {
		ip   string
		port int
		want string
	}{
		{"10.0.0.1", 17000, `{"rank_ip":"10.0.0.1","rank_port":17000}`},
		{"10.0.0.1", 17001, `{"rank_ip":"10.0.0.1","rank_port":17001}`},
		{"::ffff:10.0.0.1", 17002, `{"rank_ip":"::ffff:10.0.0.1","rank_port":17002}`},
	} {
		mustStatus(t, "PUT "+c.ip, e.do(t, "PUT", "/route", rankPUT(1, 0, 1, 0, c.ip, c.port, nil)), 200)
		if r := e.do(t, "GET", rankPath(0, 0, 0, 0), ""); r.body != c.want {
			t.Fatalf("after PUT %s:%d rank 0 = %s, want %s", c.ip, c.port, r.body, c.want)
		}
	}
	// Hostnames compare without case; IPv6 by value.
	mustStatus(t, "DELETE", e.do(t, "DELETE", "/route", ""), 200)
	for _, ip := range []string{"Prefill-0.example", "prefill-0.EXAMPLE"} {
		mustStatus(t, "PUT "+ip, e.do(t, "PUT", "/route", rankPUT(1, 0, 2, 0, ip, 17000, nil)), 200)
	}
	for _, ip := range []string{"fd00::1", "fd00:0::1", "FD00::0:1"} {
		mustStatus(t, "PUT "+ip, e.do(t, "PUT", "/route", rankPUT(1, 0, 2, 1, ip, 17000, nil)), 200)
	}
}

// Something vouching for the writer lets a rank move: the token (writes
// then carry it), or allowed_sources (the peer is then in it).
func TestMoveAcceptedWhenVouched(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  config.Bootstrap
		hdr  []string
	}{
		{"auth_token", config.Bootstrap{AuthToken: "s3cret"}, []string{"Authorization", "Bearer s3cret"}},
		{"allowed_sources", config.Bootstrap{AllowedSources: []string{"127.0.0.1"}}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := startRegistry(t, c.cfg)
			mustStatus(t, "PUT", e.do(t, "PUT", "/route", rankPUT(1, 0, 1, 0, "10.0.0.1", 17000, nil), c.hdr...), 200)
			mustStatus(t, "move", e.do(t, "PUT", "/route", rankPUT(1, 0, 1, 0, "10.0.0.9", 17009, nil), c.hdr...), 200)
			if r := e.do(t, "GET", rankPath(0, 0, 0, 0), ""); r.body != `{"rank_ip":"10.0.0.9","rank_port":17009}` {
				t.Fatalf("rank 0 = %s, want the moved address", r.body)
			}
		})
	}
}

// DELETE /route resets a namespace, after which any host may register
// first. In an open registry it is therefore taken only from loopback (an
// operator on the machine); with a token or a source list, those decide.
func TestDeleteFromLoopbackOnlyInOpenRegistry(t *testing.T) {
	open := startRegistryInMemory(t, config.Bootstrap{})
	mustStatus(t, "PUT", open.from(t, "192.0.2.7").do(t, "PUT", "/route", rankPUT(1, 0, 1, 0, "192.0.2.7", 17000, nil)), 200)
	for _, peer := range []string{"192.0.2.7", "10.0.0.1", "fd00::1", "::ffff:192.0.2.7"} {
		r := open.from(t, peer).do(t, "DELETE", "/route", "")
		mustStatus(t, "DELETE from "+peer, r, 403)
		mustContain(t, "DELETE from "+peer, r.body, `"code":403`, "loopback", "bootstrap.auth_token", "bootstrap.allowed_sources")
	}
	if !open.reg.Ready(open.addr) {
		t.Fatal("a refused DELETE reset the namespace")
	}
	for _, peer := range []string{"127.0.0.1", "127.0.0.2", "::1", "::ffff:127.0.0.1"} {
		mustStatus(t, "DELETE from "+peer, open.from(t, peer).do(t, "DELETE", "/route", ""), 200)
	}

	token := startRegistryInMemory(t, config.Bootstrap{AuthToken: "s3cret"})
	mustStatus(t, "DELETE with token from afar", token.from(t, "192.0.2.7").do(t, "DELETE", "/route", "", "Authorization", "Bearer s3cret"), 200)
	listed := startRegistryInMemory(t, config.Bootstrap{AllowedSources: []string{"192.0.2.0/24"}})
	mustStatus(t, "DELETE from an allowed source", listed.from(t, "192.0.2.7").do(t, "DELETE", "/route", ""), 200)
}
