package bootstrap

import (
	"testing"

	"pdlb/config"
)

// v0.4 era: whole-engine tp_size with engine_rank; tp=4, dp=2 → attn tp 2.
func TestLegacyV04PutAndGet(t *testing.T) {
	e := startRegistry(t, config.Bootstrap{})
	for rank := 0; rank < 4; rank++ {
		body := `{"role":"Prefill","tp_size":4,"dp_size":2,"rank_ip":"10.0.0.1","rank_port":` + itoa(17000+rank) + `,"engine_rank":"` + itoa(rank) + `"}`
		if rank == 3 {
			mustStatus(t, "before last", e.do(t, "GET", "/route?engine_rank=-1&target_dp_group=-1", ""), 503)
		}
		mustStatus(t, "v0.4 PUT", e.do(t, "PUT", "/route", body), 200)
	}
	r := e.do(t, "GET", "/route?engine_rank=-1&target_dp_group=-1", "")
	mustStatus(t, "v0.4 sentinel", r, 200)
	if r.body != `{"prefill_tp_size":4,"prefill_dp_size":2}` {
		t.Fatalf("v0.4 sentinel %s", r.body)
	}
	// engine_rank 3 = dp group 1, tp rank 1 within the group.
	r = e.do(t, "GET", "/route?engine_rank=1&target_dp_group=1", "")
	if r.body != `{"rank_ip":"10.0.0.1","rank_port":17003}` {
		t.Fatalf("v0.4 rank %d %s", r.status, r.body)
	}
	mustStatus(t, "v0.4 missing", e.do(t, "GET", "/route?engine_rank=2&target_dp_group=1", ""), 404)
	// Today's decodes read the same registrations.
	r = e.do(t, "GET", sentinelPath, "")
	if r.body != `{"attn_tp_size":2,"attn_cp_size":1,"dp_size":2,"pp_size":1,"page_size":null,"kv_cache_dtype":null,"follow_bootstrap_room":true}` {
		t.Fatalf("current sentinel over v0.4 registrations: %s", r.body)
	}
}

// v0.5 era PUT: role, no cp, no kv dtype; page_size present.
func TestLegacyV05AndFebForms(t *testing.T) {
	e := startRegistry(t, config.Bootstrap{})
	put := rankPUT(1, 0, 1, 0, "10.0.0.1", 17000, map[string]any{
		"role": "Prefill", "attn_cp_size": nil, "attn_cp_rank": nil, "kv_cache_dtype": nil,
		"load_balance_method": nil, "enable_dsa_cache_layer_split": nil, "prefill_http_port": nil,
		"system_dp_size": 2, "system_dp_rank": 0,
	})
	mustStatus(t, "v0.5 PUT", e.do(t, "PUT", "/route", put), 200)
	mustStatus(t, "v0.5 sentinel not ready", e.do(t, "GET", "/route?engine_rank=-1&target_dp_group=-1&target_pp_rank=-1", ""), 503)
	mustStatus(t, "feb sentinel not ready", e.do(t, "GET", "/route?engine_rank=-1&prefill_dp_rank=-1&target_pp_rank=-1", ""), 503)
	put1 := rankPUT(1, 0, 1, 0, "10.0.0.2", 17001, map[string]any{"role": "Prefill", "system_dp_size": 2, "system_dp_rank": 1, "kv_cache_dtype": nil})
	mustStatus(t, "PUT dp1", e.do(t, "PUT", "/route", put1), 200)

	r := e.do(t, "GET", "/route?engine_rank=-1&target_dp_group=-1&target_pp_rank=-1", "")
	if r.status != 200 || r.body != `{"prefill_attn_tp_size":1,"prefill_dp_size":2,"prefill_pp_size":1,"prefill_page_size":64}` {
		t.Fatalf("v0.5 sentinel %d %s", r.status, r.body)
	}
	r = e.do(t, "GET", "/route?engine_rank=0&target_dp_group=1&target_pp_rank=0", "")
	if r.body != `{"rank_ip":"10.0.0.2","rank_port":17001}` {
		t.Fatalf("v0.5 rank %d %s", r.status, r.body)
	}
	r = e.do(t, "GET", "/route?engine_rank=-1&prefill_dp_rank=-1&target_pp_rank=-1", "")
	if r.status != 200 || r.body != `{"attn_tp_size":1,"dp_size":2,"pp_size":1,"page_size":64,"kv_cache_dtype":null,"follow_bootstrap_room":true}` {
		t.Fatalf("feb sentinel %d %s", r.status, r.body)
	}
	r = e.do(t, "GET", "/route?engine_rank=0&prefill_dp_rank=0&target_pp_rank=0", "")
	if r.body != `{"rank_ip":"10.0.0.1","rank_port":17000}` {
		t.Fatalf("feb rank %d %s", r.status, r.body)
	}
	r = e.do(t, "GET", "/route?engine_rank=5&prefill_dp_rank=0&target_pp_rank=0", "")
	mustStatus(t, "feb missing", r, 404)
	if r.body != "Bootstrap info not found for dp_rank=0 engine_rank=5 pp_rank=0" {
		t.Fatalf("feb 404 %q", r.body)
	}
}

func TestNonPrefillRoleStoresNothing(t *testing.T) {
	e := startRegistry(t, config.Bootstrap{})
	mustStatus(t, "Decode role", e.do(t, "PUT", "/route", `{"role":"Decode","tp_size":1,"dp_size":1,"rank_ip":"h","rank_port":1,"engine_rank":0}`), 200)
	if reg, exp := e.reg.Status(e.addr); reg != 0 || exp != 0 {
		t.Fatalf("Decode registration stored: %d/%d", reg, exp)
	}
}
