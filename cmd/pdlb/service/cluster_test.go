package service

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"pdlb/bootstrap/etcdstore/etcdtest"
	"pdlb/config"
	"pdlb/proxy/proxytest"
)

// replicaLB is a Service with its admin API, kept in one etcd with others.
type replicaLB struct {
	svc   *Service
	admin string
	url   string
}

func startReplicaLB(t *testing.T, e *etcdtest.Etcd, d *proxytest.Engine, p *proxytest.Engine) *replicaLB {
	t.Helper()
	cfg := testConfig()
	cfg.Prefill = []config.Prefill{{URL: p.URL}}
	cfg.Decode = []config.Decode{{URL: d.URL}}
	cfg.Admin = config.Admin{Host: "127.0.0.1", Port: proxytest.FreePort(t)}
	cfg.Cluster.Etcd = config.Default().Cluster.Etcd
	cfg.Cluster.Etcd.Endpoints = []string{e.Endpoint()}
	cfg.Cluster.Etcd.RequestTimeout = time.Second
	svc := startService(t, &cfg, testLog(t))
	return &replicaLB{svc: svc, admin: "http://127.0.0.1:" + strconv.Itoa(cfg.Admin.Port), url: "http://" + svc.Addr()}
}

// engine answers every request 200 {"text":"ok"}, as prefill or decode.
func engine(t *testing.T) *proxytest.Engine {
	return proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{"text":"ok"}`))
}

func send(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func within(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A worker added through one replica's admin API is served by the others
// within a second; a reload of their config files does not drop it;
// removing it through any replica drains it everywhere.
func TestAdminWorkersShared(t *testing.T) {
	e := etcdtest.Start(t, "127.0.0.1")
	p, d := engine(t), engine(t)
	a := startReplicaLB(t, e, d, p)
	b := startReplicaLB(t, e, d, p)
	extra := engine(t)

	if code, body := send(t, "POST", a.admin+"/workers", `{"role":"decode","url":"`+extra.URL+`"}`); code != 201 {
		t.Fatalf("POST /workers on A: %d %s", code, body)
	}
	within(t, time.Second, "B serves the decode added on A", func() bool { return b.svc.Pool.Find(extra.URL) != nil })
	if code, body := send(t, "POST", b.admin+"/workers", `{"role":"decode","url":"`+extra.URL+`/"}`); code != 409 {
		t.Fatalf("POST of the same worker on B: %d %s, want 409", code, body)
	}
	// B's config file does not list it; a reload keeps it all the same.
	cfg := *b.svc.Config()
	if err := b.svc.Apply(&cfg); err != nil {
		t.Fatal(err)
	}
	if b.svc.Pool.Find(extra.URL) == nil {
		t.Fatal("a reload drained a worker added through etcd")
	}
	if code, body := send(t, "DELETE", b.admin+"/workers?url="+extra.URL, ""); code != 202 {
		t.Fatalf("DELETE on B: %d %s", code, body)
	}
	within(t, time.Second, "A drains the decode removed on B", func() bool { return a.svc.Pool.Find(extra.URL) == nil })
}

// With etcd down the replicas keep serving (readiness unaffected), say so in
// pdlb_cluster_store_up, refuse admin changes with 503, and take them again
// once etcd is back.
func TestEtcdDownAdmin(t *testing.T) {
	e := etcdtest.Start(t, "127.0.0.1")
	p, d := engine(t), engine(t)
	a := startReplicaLB(t, e, d, p)
	storeUp := func() string {
		_, body := send(t, "GET", a.url+"/metrics", "")
		for line := range strings.SplitSeq(body, "\n") {
			if v, ok := strings.CutPrefix(line, "pdlb_cluster_store_up "); ok {
				return v
			}
		}
		return "absent"
	}
	within(t, 5*time.Second, "store up", func() bool { return storeUp() == "1" })
	e.Stop()
	within(t, 10*time.Second, "store down", func() bool { return storeUp() == "0" })
	if code, _ := send(t, "GET", a.url+"/readiness", ""); code != 200 {
		t.Fatalf("readiness with etcd down: %d, want 200", code)
	}
	if code, body := send(t, "POST", a.url+"/generate", `{"text":"hi"}`); code != 200 {
		t.Fatalf("request with etcd down: %d %s", code, body)
	}
	extra := engine(t)
	code, body := send(t, "POST", a.admin+"/workers", `{"role":"decode","url":"`+extra.URL+`"}`)
	if code != 503 || !strings.Contains(body, "shared store") {
		t.Fatalf("POST /workers with etcd down: %d %s, want 503", code, body)
	}
	if a.svc.Pool.Find(extra.URL) != nil {
		t.Fatal("a worker refused with 503 was added all the same")
	}
	e.Start()
	within(t, 10*time.Second, "store up again", func() bool { return storeUp() == "1" })
	if code, body := send(t, "POST", a.admin+"/workers", `{"role":"decode","url":"`+extra.URL+`"}`); code != 201 {
		t.Fatalf("POST /workers after etcd is back: %d %s", code, body)
	}
}
