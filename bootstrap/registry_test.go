package bootstrap

import (
	"context"
	"errors"
	"maps"
	"sync"
	"testing"
	"time"

	"pdlb/config"
)

func TestSentinelNotReadyCountsRanks(t *testing.T) {
	e := startRegistry(t, config.Bootstrap{})
	r := e.do(t, "GET", sentinelPath, "")
	mustStatus(t, "fresh sentinel", r, 503)
	if r.retry != "1" {
		t.Fatalf("Retry-After = %q, want 1", r.retry)
	}
	mustContain(t, "fresh sentinel", r.body, "Prefill server not fully registered yet (0 of ? ranks registered).")
	mustStatus(t, "per-rank before ready", e.do(t, "GET", rankPath(0, 0, 0, 0), ""), 503)

	// tp=2, dp=2 → 4 ranks.
	mustStatus(t, "PUT", e.do(t, "PUT", "/route", rankPUT(2, 0, 2, 0, "10.0.0.1", 17000, nil)), 200)
	r = e.do(t, "GET", sentinelPath, "")
	mustStatus(t, "1 of 4", r, 503)
	mustContain(t, "1 of 4", r.body, "Prefill server not fully registered yet (1 of 4 ranks registered).")
	if r.ctype != ctText {
		t.Fatalf("content type %q", r.ctype)
	}
	if reg, exp := e.reg.Status(e.addr); reg != 1 || exp != 4 {
		t.Fatalf("Status = %d/%d, want 1/4", reg, exp)
	}
	if e.reg.Ready(e.addr) {
		t.Fatal("Ready with 1 of 4")
	}
	for _, rk := range [][2]int{{1, 0}, {0, 1}, {1, 1}} {
		mustStatus(t, "PUT", e.do(t, "PUT", "/route", rankPUT(2, rk[0], 2, rk[1], "10.0.0.2", 17001+rk[0]+2*rk[1], nil)), 200)
	}
	r = e.do(t, "GET", sentinelPath, "")
	mustStatus(t, "ready sentinel", r, 200)
	if r.ctype != ctJSON {
		t.Fatalf("content type %q", r.ctype)
	}
	if !e.reg.Ready(e.addr) || !e.reg.Ready("[::1]:"+itoa(e.port)) {
		t.Fatal("not Ready after 4 of 4 (any host with the port must map to the namespace)")
	}
}

func TestDuplicateRankDoesNotMakeReady(t *testing.T) {
	e := startRegistry(t, config.Bootstrap{})
	rank0 := rankPUT(1, 0, 1, 0, "10.0.0.1", 17000, map[string]any{"system_dp_size": 2, "system_dp_rank": 0})
	// Rank 0 restarted in place: same host, a new ZMQ port.
	rank0b := rankPUT(1, 0, 1, 0, "10.0.0.1", 17009, map[string]any{"system_dp_size": 2, "system_dp_rank": 0})
	mustStatus(t, "rank 0", e.do(t, "PUT", "/route", rank0), 200)
	mustStatus(t, "rank 0 again", e.do(t, "PUT", "/route", rank0b), 200)
	r := e.do(t, "GET", sentinelPath, "")
	mustStatus(t, "after duplicate", r, 503)
	mustContain(t, "after duplicate", r.body, "1 of 2")

	rank1 := rankPUT(1, 0, 1, 0, "10.0.0.2", 17002, map[string]any{"system_dp_size": 2, "system_dp_rank": 1})
	mustStatus(t, "rank 1", e.do(t, "PUT", "/route", rank1), 200)
	r = e.do(t, "GET", sentinelPath, "")
	mustStatus(t, "ready", r, 200)
	// rankPUT speaks today's SGLang, so the answer is today's 15 keys.
	if r.body != `{"attn_tp_size":1,"attn_cp_size":1,"dp_size":2,"pp_size":1,"page_size":64,"kv_cache_dtype":"auto","follow_bootstrap_room":true,`+
		`"enable_dsa_cache_layer_split":false,"prefill_http_port":30000,"target_tp_rank":null,"target_tp_ranks":null,"target_cp_ranks":null,`+
		`"target_pp_ranks":null,"required_dst_info_num":null,"required_prefill_response_num":null}` {
		t.Fatalf("sentinel body %s", r.body)
	}
	// The re-registration replaced rank 0's address.
	r = e.do(t, "GET", rankPath(0, 0, 0, 0), "")
	mustStatus(t, "rank 0", r, 200)
	if r.body != `{"rank_ip":"10.0.0.1","rank_port":17009}` {
		t.Fatalf("rank 0 body %s", r.body)
	}
	r = e.do(t, "GET", rankPath(1, 0, 0, 0), "")
	if r.body != `{"rank_ip":"10.0.0.2","rank_port":17002}` {
		t.Fatalf("rank 1 body %s", r.body)
	}
}

func TestPerRankLookup(t *testing.T) {
	e := startRegistry(t, config.Bootstrap{})
	mustStatus(t, "PUT", e.do(t, "PUT", "/route", rankPUT(1, 0, 1, 0, "10.0.0.1", 17000, map[string]any{"rank_port": "17000"})), 200)
	r := e.do(t, "GET", rankPath(0, 0, 0, 0), "")
	mustStatus(t, "found", r, 200)
	if r.body != `{"rank_ip":"10.0.0.1","rank_port":17000}` || r.ctype != ctJSON {
		t.Fatalf("found: %s %s", r.ctype, r.body)
	}
	r = e.do(t, "GET", "/route?prefill_dp_rank=1&prefill_cp_rank=0&target_tp_rank=0&target_pp_rank=0", "")
	mustStatus(t, "missing", r, 404)
	if r.body != "Bootstrap info not found for dp_rank=1 cp_rank=0 tp_rank=0 pp_rank=0" {
		t.Fatalf("404 body %q", r.body)
	}
	mustStatus(t, "partly sentinel", e.do(t, "GET", rankPath(-1, 0, 0, 0), ""), 404)
	// int()-like query values work.
	mustStatus(t, "padded ints", e.do(t, "GET", "/route?prefill_dp_rank=%200&prefill_cp_rank=+0&target_tp_rank=0_0&target_pp_rank=-0", ""), 200)
}

func TestPutBadRequestsNameTheField(t *testing.T) {
	e := startRegistry(t, config.Bootstrap{})
	cases := []struct{ name, body, field string }{
		{"bad json", `{"attn_tp_size":`, `"body"`},
		{"not object", `[1,2]`, `"body"`},
		{"null", `null`, `"body"`},
		{"missing attn_tp_size", rankPUT(1, 0, 1, 0, "h", 1, map[string]any{"attn_tp_size": nil}), `"attn_tp_size"`},
		{"missing rank_ip", rankPUT(1, 0, 1, 0, "h", 1, map[string]any{"rank_ip": nil}), `"rank_ip"`},
		{"missing rank_port", rankPUT(1, 0, 1, 0, "h", 1, map[string]any{"rank_port": nil}), `"rank_port"`},
		{"missing system_dp_size", rankPUT(1, 0, 1, 0, "h", 1, map[string]any{"system_dp_size": nil}), `"system_dp_size"`},
		{"string tp", rankPUT(1, 0, 1, 0, "h", 1, map[string]any{"attn_tp_size": "two"}), `"attn_tp_size"`},
		{"float port", rankPUT(1, 0, 1, 0, "h", 1, map[string]any{"rank_port": 17000.5}), `"rank_port"`},
		{"bool pp", rankPUT(1, 0, 1, 0, "h", 1, map[string]any{"pp_size": true}), `"pp_size"`},
		{"ip number", rankPUT(1, 0, 1, 0, "h", 1, map[string]any{"rank_ip": 7}), `"rank_ip"`},
		{"empty ip", rankPUT(1, 0, 1, 0, "", 1, nil), `"rank_ip"`},
		{"rank out of range", rankPUT(2, 2, 1, 0, "h", 1, nil), `"attn_tp_rank"`},
		{"zero size", rankPUT(0, 0, 1, 0, "h", 1, nil), `"attn_tp_size"`},
		{"dtype number", rankPUT(1, 0, 1, 0, "h", 1, map[string]any{"kv_cache_dtype": 3}), `"kv_cache_dtype"`},
		{"dsa string", rankPUT(1, 0, 1, 0, "h", 1, map[string]any{"enable_dsa_cache_layer_split": "yes"}), `"enable_dsa_cache_layer_split"`},
		{"role number", rankPUT(1, 0, 1, 0, "h", 1, map[string]any{"role": 1}), `"role"`},
		{"port too big", rankPUT(1, 0, 1, 0, "h", 70000, nil), `"rank_port"`},
		{"huge topology", rankPUT(65536, 0, 65536, 0, "h", 1, nil), `"topology"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.do(t, "PUT", "/route", c.body)
			mustStatus(t, c.name, r, 400)
			mustContain(t, c.name, r.body, c.field)
		})
	}
	if reg, exp := e.reg.Status(e.addr); reg != 0 || exp != 0 {
		t.Fatalf("bad PUTs stored something: %d/%d", reg, exp)
	}
}

func TestGetBadRequests(t *testing.T) {
	e := startRegistry(t, config.Bootstrap{})
	for _, q := range []string{"", "?prefill_dp_rank=0", "?prefill_dp_rank=0&prefill_cp_rank=&target_tp_rank=0&target_pp_rank=0", "?engine_rank=0"} {
		r := e.do(t, "GET", "/route"+q, "")
		mustStatus(t, q, r, 400)
		if r.body != "Missing inputs for bootstrap server." {
			t.Fatalf("%s: body %q", q, r.body)
		}
	}
	r := e.do(t, "GET", "/route?prefill_dp_rank=x&prefill_cp_rank=0&target_tp_rank=0&target_pp_rank=0", "")
	mustStatus(t, "non-integer", r, 400)
	mustContain(t, "non-integer", r.body, `"prefill_dp_rank"`)
	mustStatus(t, "float", e.do(t, "GET", "/route?prefill_dp_rank=1.0&prefill_cp_rank=0&target_tp_rank=0&target_pp_rank=0", ""), 400)
}

func TestTopologyContradictionStoresNothing(t *testing.T) {
	e := startRegistry(t, config.Bootstrap{})
	mustStatus(t, "first", e.do(t, "PUT", "/route", rankPUT(2, 0, 1, 0, "10.0.0.1", 17000, nil)), 200)
	for field, over := range map[string]map[string]any{
		"attn_tp_size":   {"attn_tp_size": 4},
		"dp_size":        {"attn_dp_size": 2},
		"pp_size":        {"pp_size": 2},
		"attn_cp_size":   {"attn_cp_size": 2},
		"page_size":      {"page_size": 32},
		"kv_cache_dtype": {"kv_cache_dtype": "fp8_e4m3"},
	} {
		r := e.do(t, "PUT", "/route", rankPUT(2, 1, 1, 0, "10.0.0.2", 17001, over))
		mustStatus(t, field, r, 400)
		mustContain(t, field, r.body, `"`+field+`"`)
	}
	if reg, exp := e.reg.Status(e.addr); reg != 1 || exp != 2 {
		t.Fatalf("after contradictions: %d/%d, want 1/2", reg, exp)
	}
	mustStatus(t, "rank 1 lookup", e.do(t, "GET", rankPath(0, 0, 1, 0), ""), 503)
}

func TestDeleteResetsForNewTopology(t *testing.T) {
	e := startRegistry(t, config.Bootstrap{})
	mustStatus(t, "old", e.do(t, "PUT", "/route", rankPUT(1, 0, 1, 0, "10.0.0.1", 17000, nil)), 200)
	mustStatus(t, "ready", e.do(t, "GET", sentinelPath, ""), 200)
	mustStatus(t, "new topology refused", e.do(t, "PUT", "/route", rankPUT(2, 0, 1, 0, "10.0.0.1", 17000, nil)), 400)
	mustStatus(t, "DELETE", e.do(t, "DELETE", "/route", ""), 200)
	r := e.do(t, "GET", sentinelPath, "")
	mustStatus(t, "after reset", r, 503)
	mustContain(t, "after reset", r.body, "0 of ?")
	if e.reg.Ready(e.addr) {
		t.Fatal("Ready after reset")
	}
	mustStatus(t, "new topology", e.do(t, "PUT", "/route", rankPUT(2, 0, 1, 0, "10.0.0.1", 17000, nil)), 200)
	mustStatus(t, "new topology", e.do(t, "PUT", "/route", rankPUT(2, 1, 1, 0, "10.0.0.1", 17001, nil)), 200)
	r = e.do(t, "GET", sentinelPath, "")
	mustStatus(t, "new ready", r, 200)
	mustContain(t, "new ready", r.body, `"attn_tp_size":2`)
}

func TestMethodsAndPaths(t *testing.T) {
	e := startRegistry(t, config.Bootstrap{})
	r := e.do(t, "POST", "/route", "{}")
	mustStatus(t, "POST /route", r, 405)
	if r.body != "Method not allowed" || r.ctype != ctJSON {
		t.Fatalf("405 quirk: %q %q", r.ctype, r.body)
	}
	mustStatus(t, "PATCH /route", e.do(t, "PATCH", "/route", ""), 405)
	r = e.do(t, "GET", "/health", "")
	mustStatus(t, "health", r, 200)
	if r.body != "OK" || r.ctype != ctText {
		t.Fatalf("health: %q %q", r.ctype, r.body)
	}
	mustStatus(t, "unknown", e.do(t, "GET", "/nope", ""), 404)
	mustStatus(t, "GET register_dp_rank", e.do(t, "GET", "/register_dp_rank", ""), 405)
	e.reg.RemoveNamespace(e.port)
	mustStatus(t, "removed namespace", e.do(t, "GET", "/health", ""), 404)
}

func TestRegistryWaitInfo(t *testing.T) {
	e := startRegistry(t, config.Bootstrap{})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := e.reg.WaitInfo(ctx, e.addr)
	if !errors.Is(err, ErrNotReady) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitInfo before ready: %v", err)
	}
	if _, err := e.reg.WaitInfo(context.Background(), "127.0.0.1:1"); !errors.Is(err, ErrUnknownPrefill) {
		t.Fatalf("unknown addr: %v", err)
	}
	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		info, err := e.reg.WaitInfo(ctx, e.addr)
		if err == nil && info.DPSize != 1 {
			err = errors.New("wrong info")
		}
		got <- err
	}()
	time.Sleep(10 * time.Millisecond)
	mustStatus(t, "PUT", e.do(t, "PUT", "/route", rankPUT(1, 0, 1, 0, "10.0.0.1", 17000, nil)), 200)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	info, ok := e.reg.Info(e.addr)
	if !ok || info.PageSize == nil || *info.PageSize != 64 || info.PrefillHTTPPort == nil || *info.PrefillHTTPPort != 30000 {
		t.Fatalf("Info = %+v, %v", info, ok)
	}
}

func TestReadyDoesNotAllocate(t *testing.T) {
	e := startRegistry(t, config.Bootstrap{})
	allocs := testing.AllocsPerRun(100, func() { _ = e.reg.Ready(e.addr) })
	if allocs != 0 {
		t.Fatalf("Ready allocates %v times", allocs)
	}
}

func itoa(n int) string { return string(appendInt(nil, n)) }

func appendInt(b []byte, n int) []byte {
	if n >= 10 {
		b = appendInt(b, n/10)
	}
	return append(b, byte('0'+n%10))
}

// TestObserveLabelsKnownRoutesOnly: requests for random paths are counted
// under "other", so a scanner cannot grow the metrics without bound.
func TestObserveLabelsKnownRoutesOnly(t *testing.T) {
	e := startRegistry(t, config.Bootstrap{})
	var mu sync.Mutex
	seen := map[string]int{}
	e.reg.Observe = func(path string, _ int) { mu.Lock(); seen[path]++; mu.Unlock() }
	for _, p := range []string{"/route?prefill_dp_rank=-1", "/health", "/x1", "/x2", "/.env", "/query_dp_ranks"} {
		e.do(t, "GET", p, "")
	}
	mu.Lock()
	defer mu.Unlock()
	want := map[string]int{"/route": 1, "/health": 1, "other": 3, "/query_dp_ranks": 1}
	if !maps.Equal(seen, want) {
		t.Fatalf("observed %v, want %v", seen, want)
	}
}
