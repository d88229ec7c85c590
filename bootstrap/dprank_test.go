package bootstrap

import (
	"testing"
	"time"

	"pdlb/config"
)

func TestDPRankSideChannelAndExpiry(t *testing.T) {
	e := startRegistry(t, config.Bootstrap{DPRankTTL: 10 * time.Second})
	mustStatus(t, "register 42", e.do(t, "POST", "/register_dp_rank", `{"bootstrap_room":42,"dp_rank":3}`), 200)
	mustStatus(t, "register big room", e.do(t, "POST", "/register_dp_rank", `{"bootstrap_room":"9223372036854775807","dp_rank":"1"}`), 200)
	r := e.do(t, "POST", "/query_dp_ranks", `{"bootstrap_rooms":[42,99,42,9223372036854775807]}`)
	mustStatus(t, "query", r, 200)
	if r.body != `{"42":3,"9223372036854775807":1}` || r.ctype != ctJSON {
		t.Fatalf("query: %s %s", r.ctype, r.body)
	}
	e.clock.Advance(9 * time.Second)
	mustStatus(t, "register 7", e.do(t, "POST", "/register_dp_rank", `{"bootstrap_room":7,"dp_rank":0}`), 200)
	e.clock.Advance(1 * time.Second) // 42 is now exactly ttl old: gone; 7 is 1 s old.
	r = e.do(t, "POST", "/query_dp_ranks", `{"bootstrap_rooms":[42,7]}`)
	if r.body != `{"7":0}` {
		t.Fatalf("after expiry: %s", r.body)
	}
	// The lazy sweep on the next write drops expired entries from memory.
	ns := e.reg.namespace(e.port)
	mustStatus(t, "register 8", e.do(t, "POST", "/register_dp_rank", `{"bootstrap_room":8,"dp_rank":0}`), 200)
	if n := ns.dp.len(); n != 2 {
		t.Fatalf("entries after sweep = %d, want 2 (7 and 8)", n)
	}
}

func TestDPRankBadInput(t *testing.T) {
	e := startRegistry(t, config.Bootstrap{})
	for _, c := range []struct{ path, body, field string }{
		{"/register_dp_rank", `{"dp_rank":1}`, `"bootstrap_room"`},
		{"/register_dp_rank", `{"bootstrap_room":1}`, `"dp_rank"`},
		{"/register_dp_rank", `{"bootstrap_room":"x","dp_rank":1}`, `"bootstrap_room"`},
		{"/register_dp_rank", `{"bootstrap_room":1,"dp_rank":-1}`, `"dp_rank"`},
		{"/register_dp_rank", `{"bootstrap_room":18446744073709551615,"dp_rank":1}`, `"bootstrap_room"`},
		{"/register_dp_rank", `[]`, `"body"`},
		{"/query_dp_ranks", `{}`, `"bootstrap_rooms"`},
		{"/query_dp_ranks", `{"bootstrap_rooms":5}`, `"bootstrap_rooms"`},
		{"/query_dp_ranks", `{"bootstrap_rooms":[1,"y"]}`, `"bootstrap_rooms[1]"`},
		{"/query_dp_ranks", `nope`, `"bootstrap_rooms"`},
	} {
		r := e.do(t, "POST", c.path, c.body)
		mustStatus(t, c.path+" "+c.body, r, 400)
		mustContain(t, c.path+" "+c.body, r.body, c.field)
	}
}
