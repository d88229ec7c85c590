package service

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"pdlb/bootstrap/etcdstore/etcdtest"
	"pdlb/config"
	"pdlb/proxy/proxytest"
	"pdlb/router"
)

// scrapeBusyLB runs pdlb with the embedded registry (two prefills), two
// decodes (one answering 503), breakers, health checks and admission
// control, drives traffic until every pdlb_ family has a series (a retry, a
// breaker transition, health results, registry requests, an admission
// refusal), and returns its /metrics body.
func scrapeBusyLB(t *testing.T) string {
	t.Helper()
	p1 := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	p2 := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	var badGenerations atomic.Int32 // health checks reach it too
	bad := proxytest.NewEngine(t, func(ctx *fasthttp.RequestCtx) {
		if ctx.IsPost() {
			badGenerations.Add(1)
		}
		proxytest.JSONAnswer(503, `{"error":"overloaded"}`)(ctx)
	})
	held, release := make(chan struct{}), make(chan struct{})
	var kvFailed atomic.Bool
	left := make(chan struct{}, 1)
	good := proxytest.NewEngine(t, func(ctx *fasthttp.RequestCtx) {
		if bytes.Contains(ctx.PostBody(), []byte("migrate")) {
			// A stream whose decode dies after one event.
			ctx.SetContentType("text/event-stream")
			conn := ctx.Conn()
			ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
				w.WriteString(`data: {"text":"a","output_ids":[5],"meta_info":{"id":"x","finish_reason":null,"completion_tokens":1}}` + "\n\n")
				w.Flush()
				time.Sleep(20 * time.Millisecond)
				conn.Close()
			})
			return
		}
		if bytes.Contains(ctx.PostBody(), []byte("leave")) {
			// Working on it until pdlb hangs up: its client left.
			left <- struct{}{}
			ctx.Conn().SetReadDeadline(time.Now().Add(5 * time.Second))
			ctx.Conn().Read(make([]byte, 1))
		}
		if bytes.Contains(ctx.PostBody(), []byte("hold")) {
			close(held)
			<-release
		}
		// Once, SGLang's KV-transfer error: a pair fault, retried on another pair.
		if bytes.Contains(ctx.PostBody(), []byte("kvfail")) && kvFailed.CompareAndSwap(false, true) {
			proxytest.JSONAnswer(500, `{"error":{"message":"Decode transfer failed for request rank=0 with exception KVTransferError(bootstrap_room=1)"}}`)(ctx)
			return
		}
		proxytest.JSONAnswer(200, `{"ok":true}`)(ctx)
	})
	port1, port2 := proxytest.FreePort(t), proxytest.FreePort(t)
	// A replica of a cluster, so pdlb_cluster_store_up is written too (and
	// the registrations below go through etcd).
	etcd := etcdtest.Start(t, "127.0.0.1")
	l := startLB(t, nil, []*proxytest.Engine{bad, good}, func(c *config.Config) {
		c.Cluster.Etcd = config.Default().Cluster.Etcd
		c.Cluster.Etcd.Endpoints = []string{etcd.Endpoint()}
		c.Breaker = config.Breaker{Enabled: true, ConsecutiveFailures: 1, OpenTimeout: time.Minute, HalfOpenMaxRequests: 1, Window: time.Minute}
		c.Retry.MaxAttempts, c.Retry.MigrationLimit = 3, 1
		c.Limits.MaxConcurrentRequests, c.Limits.QueueSize, c.Limits.QueueTimeout = 1, 0, time.Second
		// Results are counted from the first check; no backend changes health.
		c.Health = config.Health{Interval: 10 * time.Millisecond, Timeout: time.Second, FailThreshold: 1 << 20, PassThreshold: 1}
		c.Bootstrap = config.Bootstrap{Mode: "embedded", AdvertiseHost: "127.0.0.1", ListenHost: "127.0.0.1", InfoWait: time.Second}
		c.Prefill = []config.Prefill{{URL: p1.URL, BootstrapPort: &port1}, {URL: p2.URL, BootstrapPort: &port2}}
		c.Abort = config.Abort{Enabled: true, Timeout: time.Second, MaxInFlight: 8}
		// Discovery on (an API server without a pod), so pdlb_discovery_pods is written too.
		c.Discovery.Kubernetes = config.Default().Discovery.Kubernetes
		c.Discovery.Kubernetes.Enabled, c.Discovery.Kubernetes.Namespace, c.Discovery.Kubernetes.DecodeSelector = true, "llm", "app=sglang,role=decode"
	})
	// Registered last, so it runs first: pdlb and the decode shut down only
	// after the held request is let go, even when the test fails early.
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	// One rank per prefill namespace makes both prefills registry-ready.
	const rank = `{"attn_tp_size":1,"attn_tp_rank":0,"attn_cp_size":1,"attn_cp_rank":0,"attn_dp_size":1,"attn_dp_rank":0,` +
		`"pp_size":1,"pp_rank":0,"system_dp_size":1,"system_dp_rank":0,"rank_ip":"127.0.0.1","rank_port":17000,` +
		`"page_size":64,"kv_cache_dtype":"auto","prefill_http_port":30000}`
	for _, port := range []int{port1, port2} {
		req, err := http.NewRequest(http.MethodPut, "http://127.0.0.1:"+strconv.Itoa(port)+"/route", strings.NewReader(rank))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if resp, body := proxytest.ReadAll(t, resp, err); resp.StatusCode != 200 {
			t.Fatalf("PUT /route on %d: %d %s", port, resp.StatusCode, body)
		}
	}
	// Until the 503 decode is picked once: that request is retried on the
	// other decode, and the 503 opens the failing decode's breaker.
	for i := 0; badGenerations.Load() == 0; i++ {
		if i == 50 {
			t.Fatal("the 503 decode was never picked")
		}
		if resp, body := proxytest.Post(t, l.URL+"/generate", `{"text":"hi"}`); resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
	}
	if resp, body := proxytest.Post(t, l.URL+"/generate", `{"text":"kvfail"}`); resp.StatusCode != 200 || !kvFailed.Load() {
		t.Fatalf("a request whose first pair failed its KV transfer: %d %s", resp.StatusCode, body)
	}
	// A client that leaves while the decode works: pdlb aborts it there.
	c, err := net.Dial("tcp", strings.TrimPrefix(l.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	const leave = `{"text":"leave"}`
	fmt.Fprintf(c, "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(leave), leave)
	select {
	case <-left:
	case <-time.After(5 * time.Second):
		t.Fatal("the leaving request did not reach the decode")
	}
	c.Close()
	if !proxytest.WaitFor(5*time.Second, func() bool {
		_, body := proxytest.Get(t, l.URL+"/metrics")
		return strings.Contains(body, `pdlb_aborts_total{role="decode",reason="client_gone",result="ok"} 1`)
	}) {
		t.Fatal("no abort for the client that left")
	}
	// One request held in the only admission slot; the next one is refused.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); proxytest.Post(t, l.URL+"/generate", `{"text":"hold"}`) }()
	select {
	case <-held:
	case <-time.After(5 * time.Second):
		t.Fatal("the held request did not reach the decode")
	}
	if resp, body := proxytest.Post(t, l.URL+"/generate", `{"text":"hi"}`); resp.StatusCode != 429 {
		t.Fatalf("beyond the admission limit: %d %s", resp.StatusCode, body)
	}
	unblock()
	wg.Wait()
	// A stream whose decode dies after one event: its breaker opens, the
	// other decode's is open (last: it leaves no decode), so the migration finds no pair and the stream
	// ends with the error event (pdlb_migrations_total{result="failed"}).
	if resp, body := proxytest.Post(t, l.URL+"/generate", `{"text":"migrate","stream":true}`); resp.StatusCode != 200 ||
		!strings.Contains(body, `"text":"a"`) || !strings.Contains(body, `{"error":`) || strings.Contains(body, "[DONE]") {
		t.Fatalf("a stream whose migration finds no pair: %d %s", resp.StatusCode, body)
	}
	var body string
	if !proxytest.WaitFor(5*time.Second, func() bool {
		_, body = proxytest.Get(t, l.URL+"/metrics")
		return strings.Contains(body, `result="ok"`) && strings.Contains(body, `result="fail"`) && strings.Contains(body, "pdlb_cluster_store_up 1") &&
			strings.Contains(body, `pdlb_discovery_pods{role="decode"} 0`)
	}) {
		t.Fatal("no ok and fail health-check results, or etcd not up, in /metrics")
	}
	return body
}

// exposedFamily is what a scrape says about one family.
type exposedFamily struct {
	help, types []string
	samples     []string // sample names (name_bucket, name_sum, … for histograms)
}

// parseExposition reads a text exposition family by family, on its own
// (not with the code under test): a sample belongs to the family of the
// block it is in when its name is the family's or, for a histogram or
// summary, the family's plus a reserved suffix; otherwise its name is a
// family of its own (one without metadata). It reports a family whose lines
// are not contiguous, and metadata after a family's first sample.
func parseExposition(body string) (map[string]*exposedFamily, []string, []error) {
	fams := map[string]*exposedFamily{}
	var order []string
	var errs []error
	cur, split := "", map[string]bool{}
	enter := func(name string) *exposedFamily {
		if name != cur {
			if _, seen := fams[name]; seen {
				if !split[name] {
					errs = append(errs, errors.New(name+": lines not contiguous"))
				}
				split[name] = true
			} else {
				fams[name] = &exposedFamily{}
				order = append(order, name)
			}
			cur = name
		}
		return fams[name]
	}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if kind, rest, ok := strings.Cut(line, " "); ok && kind == "#" {
			kind, rest, _ = strings.Cut(rest, " ")
			name, text, _ := strings.Cut(rest, " ")
			if kind != "HELP" && kind != "TYPE" {
				continue
			}
			f := enter(name)
			if len(f.samples) > 0 {
				errs = append(errs, errors.New(name+": "+kind+" after its samples"))
			}
			if kind == "HELP" {
				f.help = append(f.help, text)
			} else {
				f.types = append(f.types, text)
			}
			continue
		}
		if strings.TrimSpace(line) == "" {
			continue
		}
		name := line[:strings.IndexAny(line, "{ ")]
		fam := name
		if c := fams[cur]; c != nil && len(c.types) > 0 {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				typ := c.types[0]
				if name == cur+suffix && (typ == "histogram" || typ == "summary" && suffix != "_bucket") {
					fam = cur
				}
			}
		}
		f := enter(fam)
		f.samples = append(f.samples, name)
	}
	return fams, order, errs
}

// TestMetricsExpositionDescribesEveryFamily: each pdlb_ family of a real
// scrape has exactly one non-empty # HELP and one # TYPE, before its
// samples, with all its samples together; on Linux the Go runtime and
// process families too.
func TestMetricsExpositionDescribesEveryFamily(t *testing.T) {
	body := scrapeBusyLB(t)
	fams, order, errs := parseExposition(body)
	for _, err := range errs {
		t.Error(err)
	}
	for _, name := range order {
		f := fams[name]
		if !strings.HasPrefix(name, "pdlb_") && runtime.GOOS != "linux" {
			continue // the process families are described for Linux only
		}
		if len(f.help) != 1 || strings.TrimSpace(f.help[0]) == "" {
			t.Errorf("%s: HELP lines %q, want one with text", name, f.help)
		}
		if len(f.types) != 1 {
			t.Errorf("%s: TYPE lines %q, want one", name, f.types)
			continue
		}
		switch typ := f.types[0]; {
		case typ != router.FamilyType(name):
			t.Errorf("%s: TYPE %s, the table says %q", name, typ, router.FamilyType(name))
		case typ == "histogram" && !strings.HasPrefix(name, "go_") &&
			!(slices.Contains(f.samples, name+"_bucket") && slices.Contains(f.samples, name+"_sum") && slices.Contains(f.samples, name+"_count")):
			t.Errorf("%s: histogram without _bucket, _sum and _count samples: %q", name, f.samples)
		}
	}
	// The scenario reaches every pdlb_ family, so every one was checked.
	for _, name := range router.FamilyNames() {
		if _, ok := fams[name]; !ok && strings.HasPrefix(name, "pdlb_") {
			t.Errorf("the scrape has no %s: the scenario missed it", name)
		}
	}
	if t.Failed() {
		t.Logf("scrape:\n%s", body)
	}
}

// TestMetricsPassPromtoolCheck: `promtool check metrics` finds nothing to
// say about pdlb's families (and cannot fail to parse the scrape).
// Without promtool on PATH it skips, except under CI (CI set), which fails.
func TestMetricsPassPromtoolCheck(t *testing.T) {
	promtool := lookPromtool(t)
	body := scrapeBusyLB(t)
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	out, err := cmd.CombinedOutput()
	// Exit status 3 is lint findings, which may name the runtime's own
	// families; anything else non-zero is a failure to read the scrape.
	var exit *exec.ExitError
	if err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 3) {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		switch {
		case line == "":
		case strings.Contains(line, "pdlb_"):
			t.Errorf("promtool: %s", line)
		default:
			t.Logf("promtool (not pdlb's): %s", line)
		}
	}
}
