package service

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"pdlb/config"
	"pdlb/proxy/proxytest"
)

// TestDPAwareSpreadsRanks: with policy.dp_aware, requests to a prefill and
// a decode with two DP ranks each go to the least-loaded ranks: the prefill
// gets routed_dp_rank p, the decode disagg_prefill_dp_rank p and its own
// routed_dp_rank, the room satisfies room % 2 == p; GET /workers shows the
// load per rank; a client's rank wins.
func TestDPAwareSpreadsRanks(t *testing.T) {
	held := make(chan struct{})
	release := sync.OnceFunc(func() { close(held) })
	engine := func(serverInfo string) fasthttp.RequestHandler {
		return func(ctx *fasthttp.RequestCtx) {
			switch string(ctx.Path()) {
			case "/server_info":
				proxytest.JSONAnswer(200, serverInfo)(ctx)
			case "/health":
				ctx.SetStatusCode(200)
			default:
				<-held
				proxytest.JSONAnswer(200, `{"text":"ok"}`)(ctx)
			}
		}
	}
	p := proxytest.NewEngine(t, engine(`{}`))
	d := proxytest.NewEngine(t, engine(`{"internal_states":[{},{}]}`))
	t.Cleanup(release)
	bootPort, adminPort := proxytest.FreePort(t), proxytest.FreePort(t)
	l := startLB(t, nil, []*proxytest.Engine{d}, func(c *config.Config) {
		c.Bootstrap = config.Default().Bootstrap
		c.Bootstrap.ListenHost = "127.0.0.1"
		c.Prefill = []config.Prefill{{URL: p.URL, BootstrapPort: &bootPort}}
		c.Health = config.Health{Interval: 20 * time.Millisecond, Timeout: time.Second, FailThreshold: 3, PassThreshold: 1}
		c.Policy.DPAware = true
		c.Admin = config.Admin{Host: "127.0.0.1", Port: adminPort}
	})
	// Two DP ranks register with the embedded registry.
	for rank := range 2 {
		body := `{"attn_tp_size":1,"attn_tp_rank":0,"attn_dp_size":2,"attn_dp_rank":` + strconv.Itoa(rank) +
			`,"pp_size":1,"pp_rank":0,"system_dp_size":1,"system_dp_rank":0,"rank_ip":"127.0.0.1","rank_port":` + strconv.Itoa(17000+rank) +
			`,"page_size":64,"kv_cache_dtype":"auto"}`
		req, _ := http.NewRequest(http.MethodPut, "http://127.0.0.1:"+strconv.Itoa(bootPort)+"/route", strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if resp, body := proxytest.ReadAll(t, resp, err); resp.StatusCode != 200 {
			t.Fatalf("register rank %d: %d %s", rank, resp.StatusCode, body)
		}
	}
	workers := func() []Worker {
		var ws []Worker
		_, body := proxytest.Get(t, "http://127.0.0.1:"+strconv.Itoa(adminPort)+"/workers")
		if err := json.Unmarshal([]byte(body), &ws); err != nil {
			t.Fatal(err)
		}
		return ws
	}
	if !proxytest.WaitFor(3*time.Second, func() bool { return len(workers()[1].DPInFlight) == 2 }) {
		t.Fatalf("the decode's DP size was not learnt: %+v", workers())
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { proxytest.Post(t, l.URL+"/generate", `{"text":"hi"}`) })
	}
	if !proxytest.WaitFor(3*time.Second, func() bool { return len(posts(p)) == 4 && len(posts(d)) == 4 }) {
		t.Fatalf("%d prefill and %d decode requests held, want 4 each", len(posts(p)), len(posts(d)))
	}
	for _, w := range workers() {
		if len(w.DPInFlight) != 2 || w.DPInFlight[0] != 2 || w.DPInFlight[1] != 2 {
			t.Fatalf("%s %s: in flight per DP rank %v, want [2 2]", w.Role, w.URL, w.DPInFlight)
		}
	}
	byRoom := map[int64]int64{} // room → the prefill's routed_dp_rank
	for _, b := range posts(p) {
		room, rank := gjson.GetBytes(b, "bootstrap_room").Int(), gjson.GetBytes(b, "routed_dp_rank").Int()
		if room%2 != rank {
			t.Fatalf("prefill body %s: room %% 2 != routed_dp_rank", b)
		}
		byRoom[room] = rank
	}
	for _, b := range posts(d) {
		room := gjson.GetBytes(b, "bootstrap_room").Int()
		if got := gjson.GetBytes(b, "disagg_prefill_dp_rank"); !got.Exists() || got.Int() != byRoom[room] {
			t.Fatalf("decode body %s: disagg_prefill_dp_rank, want %d", b, byRoom[room])
		}
		if !gjson.GetBytes(b, "routed_dp_rank").Exists() {
			t.Fatalf("decode body %s: no routed_dp_rank of its own", b)
		}
	}
	release()
	wg.Wait()
	if !proxytest.WaitFor(2*time.Second, func() bool {
		for _, w := range workers() {
			if w.DPInFlight[0]+w.DPInFlight[1] != 0 {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("in flight per DP rank not back to 0: %+v", workers())
	}
	// A client's rank wins.
	proxytest.Post(t, l.URL+"/generate", `{"text":"hi","disagg_prefill_dp_rank":1}`)
	// The prefill leg runs beside the decode's: it may reach its engine
	// just after the client has its answer.
	proxytest.WaitFor(2*time.Second, func() bool { return len(posts(p)) == 5 })
	if ps := posts(p); len(ps) != 5 {
		t.Fatalf("%d prefill requests, want 5", len(ps))
	}
	if last := posts(p)[4]; gjson.GetBytes(last, "routed_dp_rank").Int() != 1 || gjson.GetBytes(last, "bootstrap_room").Int()%2 != 1 {
		t.Fatalf("client rank 1: prefill body %s", last)
	}
}

// posts are the bodies of the generation requests an engine received (its
// health and info GETs have none).
func posts(e *proxytest.Engine) [][]byte {
	var out [][]byte
	for _, b := range e.Bodies() {
		if len(b) > 0 {
			out = append(out, b)
		}
	}
	return out
}
