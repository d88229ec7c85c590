package etcdstore

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
	clientv3 "go.etcd.io/etcd/client/v3"

	"pdlb"
	"pdlb/bootstrap"
	"pdlb/bootstrap/etcdstore/etcdtest"
	"pdlb/config"
	"pdlb/proxy/proxytest"
)

// The namespace the tests register in; the listeners are on free ports.
const testPort = 8998

// replica is one pdlb's embedded registry, kept in etcd and served on a
// loopback listener.
type replica struct {
	reg  *bootstrap.Registry
	base string
}

func newClient(t *testing.T, e *etcdtest.Etcd) *clientv3.Client {
	t.Helper()
	cfg := config.Default().Cluster.Etcd
	cfg.Endpoints = []string{e.Endpoint()}
	cfg.DialTimeout = 2 * time.Second
	cli, err := Connect(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// startReplica runs a registry namespace for port kept in etcd under prefix.
func startReplica(t *testing.T, e *etcdtest.Etcd, prefix string, ports ...int) *replica {
	t.Helper()
	cfg := config.Default().Bootstrap
	reg := bootstrap.NewRegistry(cfg, zerolog.Nop(), pdlb.SystemClock())
	store := NewRegistry(newClient(t, e), prefix, reg, zerolog.Nop())
	reg.SetStore(store, 2*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); store.Mirror(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	r := &replica{reg: reg}
	for i, port := range ports {
		srv := reg.NewServer(port)
		ln := proxytest.Listen(t, "127.0.0.1:0")
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Shutdown(context.Background()) })
		if i == 0 {
			r.base = "http://" + ln.Addr().String()
		}
	}
	return r
}

func do(t *testing.T, method, url, body string) (int, string, string) {
	t.Helper()
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(method)
	req.SetRequestURI(url)
	if body != "" {
		req.SetBodyString(body)
	}
	if err := fasthttp.DoTimeout(req, resp, 10*time.Second); err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return resp.StatusCode(), string(resp.Body()), string(resp.Header.Peek("Retry-After"))
}

// rankBody is a current-era PUT /route body for rank tp of an attn_tp_size tpSize prefill.
func rankBody(tpSize, tp int, ip string, port int) string {
	return fmt.Sprintf(`{"attn_tp_size":%d,"attn_tp_rank":%d,"attn_cp_size":1,"attn_cp_rank":0,"pp_size":1,"pp_rank":0,`+
		`"attn_dp_size":1,"attn_dp_rank":0,"system_dp_size":1,"system_dp_rank":0,"rank_ip":%q,"rank_port":%d,`+
		`"page_size":64,"kv_cache_dtype":"auto"}`, tpSize, tp, ip, port)
}

const sentinel = "/route?prefill_dp_rank=-1&prefill_cp_rank=-1&target_tp_rank=-1&target_pp_rank=-1"

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A prefill registers with one replica; a decode asking another finds it:
// the point of the shared registry.
func TestRegistrationSeenByAnotherReplica(t *testing.T) {
	e := etcdtest.Start(t, "127.0.0.1")
	a := startReplica(t, e, "/t/", testPort)
	b := startReplica(t, e, "/t/", testPort)

	if code, body, _ := do(t, "PUT", a.base+"/route", rankBody(2, 0, "10.0.0.1", 17000)); code != 200 {
		t.Fatalf("PUT rank 0 on A: %d %s", code, body)
	}
	// Half registered: B knows the count, and still answers 503.
	eventually(t, 5*time.Second, "B sees 1 of 2 ranks", func() bool {
		n, want := b.reg.Status(fmt.Sprintf("x:%d", testPort))
		return n == 1 && want == 2
	})
	if code, body, ra := do(t, "GET", b.base+sentinel, ""); code != 503 || ra != "1" || !strings.Contains(body, "1 of 2") {
		t.Fatalf("sentinel on B, half registered: %d %q Retry-After %q", code, body, ra)
	}
	if code, body, _ := do(t, "PUT", b.base+"/route", rankBody(2, 1, "10.0.0.1", 17001)); code != 200 {
		t.Fatalf("PUT rank 1 on B: %d %s", code, body)
	}
	// The replica that took the write answers from it at once.
	if code, body, _ := do(t, "GET", b.base+sentinel, ""); code != 200 || !strings.Contains(body, `"attn_tp_size":2`) {
		t.Fatalf("sentinel on B right after its write: %d %s", code, body)
	}
	eventually(t, 5*time.Second, "A ready", func() bool { return a.reg.Ready(fmt.Sprintf("x:%d", testPort)) })
	code, body, _ := do(t, "GET", a.base+"/route?prefill_dp_rank=0&prefill_cp_rank=0&target_tp_rank=1&target_pp_rank=0", "")
	if code != 200 || body != `{"rank_ip":"10.0.0.1","rank_port":17001}` {
		t.Fatalf("rank 1 on A: %d %s", code, body)
	}
}

// Two replicas taking the first registrations of one prefill at once, with
// topologies that contradict each other: one topology wins everywhere and
// every registration of the other is refused (none is half-stored).
func TestConcurrentTopologiesOneWins(t *testing.T) {
	e := etcdtest.Start(t, "127.0.0.1")
	a := startReplica(t, e, "/t/", testPort)
	b := startReplica(t, e, "/t/", testPort)
	var wg sync.WaitGroup
	codes := make([][2]int, 8)
	for i := range codes {
		wg.Go(func() {
			// Replica A is sent tp=4 layouts, B tp=2, interleaved.
			c, _, _ := do(t, "PUT", a.base+"/route", rankBody(4, i%4, "10.0.0.1", 17000+i))
			d, _, _ := do(t, "PUT", b.base+"/route", rankBody(2, i%2, "10.0.0.1", 18000+i))
			codes[i] = [2]int{c, d}
		})
	}
	wg.Wait()
	var ok4, ok2 int
	for _, c := range codes {
		if c[0] == 200 {
			ok4++
		}
		if c[1] == 200 {
			ok2++
		}
		if (c[0] != 200 && c[0] != 400) || (c[1] != 200 && c[1] != 400) {
			t.Fatalf("answers %v: want 200 or 400 only", codes)
		}
	}
	if (ok4 == 0) == (ok2 == 0) {
		t.Fatalf("tp=4 taken %d times, tp=2 %d times: exactly one topology must win (%v)", ok4, ok2, codes)
	}
	want := 2
	if ok4 > 0 {
		want = 4
	}
	for _, r := range []*replica{a, b} {
		eventually(t, 5*time.Second, "both replicas hold the winner", func() bool {
			n, exp := r.reg.Status(fmt.Sprintf("x:%d", testPort))
			return exp == want && n == want
		})
	}
}

// etcd down: lookups keep being answered from the copy, writes get 503 +
// Retry-After (never a 200 for a write not stored), and once etcd is back
// writes are taken and every replica catches up.
func TestEtcdOutage(t *testing.T) {
	e := etcdtest.Start(t, "127.0.0.1")
	a := startReplica(t, e, "/t/", testPort)
	b := startReplica(t, e, "/t/", testPort)
	if code, body, _ := do(t, "PUT", a.base+"/route", rankBody(1, 0, "10.0.0.1", 17000)); code != 200 {
		t.Fatalf("PUT: %d %s", code, body)
	}
	eventually(t, 5*time.Second, "B ready", func() bool { return b.reg.Ready(fmt.Sprintf("x:%d", testPort)) })

	t1 := time.Now()
	e.Stop()
	defer func() { t.Logf("outage part took %s", time.Since(t1)) }()
	if code, _, _ := do(t, "GET", b.base+sentinel, ""); code != 200 {
		t.Fatalf("sentinel on B with etcd down: %d, want 200 from the copy", code)
	}
	code, body, ra := do(t, "PUT", a.base+"/route", rankBody(1, 0, "10.0.0.1", 17002))
	if code != 503 || ra != "1" || !strings.Contains(body, "not stored") {
		t.Fatalf("PUT with etcd down: %d %q Retry-After %q; want 503 naming the store", code, body, ra)
	}
	if code, _, _ := do(t, "DELETE", a.base+"/route", ""); code != 503 {
		t.Fatalf("DELETE with etcd down: %d, want 503", code)
	}
	if code, _, _ := do(t, "GET", a.base+sentinel, ""); code != 200 {
		t.Fatalf("sentinel on A after the refused writes: %d, want 200 (nothing changed)", code)
	}

	t0 := time.Now()
	e.Start()
	t.Logf("etcd restarted in %s", time.Since(t0))
	// The registrant retries until etcd takes the write.
	eventually(t, 15*time.Second, "PUT taken after etcd is back", func() bool {
		code, _, _ := do(t, "PUT", a.base+"/route", rankBody(1, 0, "10.0.0.1", 17003))
		return code == 200
	})
	t.Logf("PUT taken %s after the restart", time.Since(t0))
	eventually(t, 10*time.Second, "B has the new rank_port", func() bool {
		_, body, _ := do(t, "GET", b.base+"/route?prefill_dp_rank=0&prefill_cp_rank=0&target_tp_rank=0&target_pp_rank=0", "")
		return strings.Contains(body, "17003")
	})
	t.Logf("B caught up %s after the restart", time.Since(t0))
}

// DELETE /route on one replica resets the namespace on all of them, so a
// restarted prefill may register another topology through any replica.
func TestResetSharedByAllReplicas(t *testing.T) {
	e := etcdtest.Start(t, "127.0.0.1")
	a := startReplica(t, e, "/t/", testPort)
	b := startReplica(t, e, "/t/", testPort)
	do(t, "PUT", a.base+"/route", rankBody(1, 0, "10.0.0.1", 17000))
	eventually(t, 5*time.Second, "B ready", func() bool { return b.reg.Ready(fmt.Sprintf("x:%d", testPort)) })
	if code, body, _ := do(t, "DELETE", b.base+"/route", ""); code != 200 {
		t.Fatalf("DELETE on B: %d %s", code, body)
	}
	eventually(t, 5*time.Second, "A reset", func() bool {
		n, _ := a.reg.Status(fmt.Sprintf("x:%d", testPort))
		return n == 0
	})
	if code, body, _ := do(t, "PUT", a.base+"/route", rankBody(2, 0, "10.0.0.9", 17000)); code != 200 {
		t.Fatalf("another topology after the reset: %d %s", code, body)
	}
}

// A replica that starts later, or adds the prefill later, gets what is
// stored: a registration outlives the replica that took it.
func TestLateReplicaAdoptsStoredState(t *testing.T) {
	e := etcdtest.Start(t, "127.0.0.1")
	a := startReplica(t, e, "/t/", testPort)
	do(t, "PUT", a.base+"/route", rankBody(1, 0, "10.0.0.1", 17000))
	b := startReplica(t, e, "/t/")
	time.Sleep(50 * time.Millisecond) // let B's list arrive before the namespace (either order must work)
	b.reg.AddNamespace(testPort)
	eventually(t, 5*time.Second, "B ready", func() bool { return b.reg.Ready(fmt.Sprintf("x:%d", testPort)) })
	// Another prefix is another cluster.
	c := startReplica(t, e, "/other/", testPort)
	time.Sleep(100 * time.Millisecond)
	if c.reg.Ready(fmt.Sprintf("x:%d", testPort)) {
		t.Fatal("a replica under another prefix sees the registration")
	}
}
