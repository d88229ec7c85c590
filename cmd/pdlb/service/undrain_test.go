package service

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"pdlb/proxy"
	"pdlb/proxy/proxytest"
)

// TestUndrainWhileDraining: a worker undrained before its last request is
// done goes back into the pool as the same backend (its connections kept
// open), and its drain ends without closing it.
func TestUndrainWhileDraining(t *testing.T) {
	eng := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	s := startAdmin(t, nil, nil, "")
	if st, body := s.do(t, "POST", "/workers", `{"role":"decode","url":"`+eng.URL+`"}`, ""); st != 201 {
		t.Fatalf("add: %d %s", st, body)
	}
	b := s.pool.Find(eng.URL)
	if res, err := b.Call("GET", "/health", nil, time.Second); err != nil || res.Status != 200 {
		t.Fatalf("warm-up call: %v %v", res.Status, err)
	}
	ticket, _ := b.Acquire()
	if st, body := s.do(t, "DELETE", "/workers?url="+url.QueryEscape(eng.URL), "", ""); st != 202 {
		t.Fatalf("DELETE: %d %s", st, body)
	}
	st, body := s.do(t, "POST", "/workers/undrain?url="+url.QueryEscape(eng.URL+"/"), "", "")
	if st != 200 {
		t.Fatalf("undrain: %d %s", st, body)
	}
	if w := decodeWorker(t, body); w.Draining || w.InFlight != 1 || w.URL != eng.URL {
		t.Fatalf("undrain answered %+v, want the same worker serving with its request in flight", w)
	}
	if s.pool.Find(eng.URL) != b || b.Draining() {
		t.Fatal("not the same backend back in the pool, serving")
	}
	ticket.Done(nil)
	if eng.WaitClosed(300 * time.Millisecond) {
		t.Fatal("an undrained backend's connections were closed")
	}
	if ws := s.workers(t); len(ws) != 1 || ws[0].Draining {
		t.Fatalf("GET /workers = %+v, want one serving worker", ws)
	}
	if len(s.admin.Drained()) != 0 || len(s.admin.Draining()) != 0 {
		t.Fatal("an undrained worker is still listed as draining or drained")
	}
}

// TestUndrainAfterDrain: a worker whose drain finished is remembered and
// added back as it was (a prefill with its bootstrap port), 201.
func TestUndrainAfterDrain(t *testing.T) {
	s := startAdmin(t, nil, nil, "")
	const u = "http://127.0.0.1:30001"
	if st, body := s.do(t, "POST", "/workers", `{"role":"prefill","url":"`+u+`","bootstrap_port":9001}`, ""); st != 201 {
		t.Fatalf("add: %d %s", st, body)
	}
	old := s.pool.Find(u)
	if st, body := s.do(t, "DELETE", "/workers?url="+u, "", ""); st != 202 {
		t.Fatalf("DELETE: %d %s", st, body)
	}
	if !proxytest.WaitFor(2*time.Second, func() bool { return len(s.admin.Drained()) == 1 }) {
		t.Fatal("the finished drain is not remembered")
	}
	if d := s.admin.Drained()[0]; d.URL != u || d.Role != proxy.Prefill || d.BootstrapPort == nil || *d.BootstrapPort != 9001 {
		t.Fatalf("remembered %+v", d)
	}
	st, body := s.do(t, "POST", "/workers/undrain?url="+u, "", "")
	if st != 201 {
		t.Fatalf("undrain: %d %s", st, body)
	}
	w := decodeWorker(t, body)
	if w.Role != "prefill" || w.URL != u || w.Draining || w.BootstrapPort == nil || *w.BootstrapPort != 9001 {
		t.Fatalf("undrain answered %+v", w)
	}
	if b := s.pool.Find(u); b == nil || b == old {
		t.Fatal("not added back as a fresh backend")
	}
	if len(s.admin.Drained()) != 0 {
		t.Fatal("still remembered as drained")
	}
	// Serving already: nothing to do.
	if st, body := s.do(t, "POST", "/workers/undrain?url="+u, "", ""); st != 200 {
		t.Fatalf("undrain of a serving worker: %d %s", st, body)
	}
}

// TestUndrainRefusals: what undrain refuses, in pdlb's error shape.
func TestUndrainRefusals(t *testing.T) {
	s := startAdmin(t, nil, nil, "")
	for _, c := range []struct {
		name, method, path string
		status             int
		mention            string
	}{
		{"unknown", "POST", "/workers/undrain?url=http://127.0.0.1:1", 404, "no draining or drained worker"},
		{"without url", "POST", "/workers/undrain", 400, "url"},
		{"bad url", "POST", "/workers/undrain?url=ftp://h:1", 400, "url"},
		{"wrong method", "GET", "/workers/undrain?url=http://127.0.0.1:1", 405, "use POST"},
		{"unknown path", "POST", "/workers/undrainx", 404, "/workers/undrainx"},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, body := s.do(t, c.method, c.path, "", "")
			if st != c.status {
				t.Fatalf("status %d, want %d: %s", st, c.status, body)
			}
			if code, _, msg := errorMessage(t, body); code != c.status || !strings.Contains(msg, c.mention) {
				t.Fatalf("error %d %q, want %d naming %q", code, msg, c.status, c.mention)
			}
		})
	}
	k := startAdmin(t, nil, nil, "s3cret")
	if st, _ := k.do(t, "POST", "/workers/undrain?url=http://127.0.0.1:1", "", ""); st != 401 {
		t.Fatalf("undrain without the key: %d, want 401", st)
	}
}

// TestAdoptForgetsTheDrained: a worker drained out, then added back by a
// replica's etcd watch or by discovery (Adopt, not POST /workers), is
// serving and no longer listed as drained (the status page showed it
// twice).
func TestAdoptForgetsTheDrained(t *testing.T) {
	s := startAdmin(t, nil, nil, "")
	const u = "http://127.0.0.1:30001"
	if st, body := s.do(t, "POST", "/workers", `{"role":"decode","url":"`+u+`"}`, ""); st != 201 {
		t.Fatalf("add: %d %s", st, body)
	}
	if st, body := s.do(t, "DELETE", "/workers?url="+u, "", ""); st != 202 {
		t.Fatalf("DELETE: %d %s", st, body)
	}
	if !proxytest.WaitFor(2*time.Second, func() bool { return len(s.admin.Drained()) == 1 }) {
		t.Fatal("the finished drain is not remembered")
	}
	if b, err := s.admin.Adopt(proxy.Decode, u, nil); err != nil || b == nil {
		t.Fatalf("Adopt: %v %v", b, err)
	}
	if d := s.admin.Drained(); len(d) != 0 || s.pool.Find(u) == nil {
		t.Errorf("after Adopt: drained %+v, in the pool %v", d, s.pool.Find(u) != nil)
	}
}
