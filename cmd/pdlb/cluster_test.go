package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"pdlb/bootstrap/etcdstore/etcdtest"
	"pdlb/proxy/proxytest"
)

// TestClusterOfThreeReplicas runs what README "Running several replicas"
// describes, with real binaries on loopback: etcd, three pdlb replicas
// (each on its own address: 127.0.0.1, .2, .3, the same ports), a mock
// prefill of two ranks that registers through replica 1 only, and mock
// decodes that look its ranks up through whichever replica served the
// request (the bootstrap_host it injected).
func TestClusterOfThreeReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("builds pdlb and runs seven processes")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "pdlb")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	etcd := etcdtest.Start(t, "127.0.0.1")
	ports := proxytest.FreePorts(t, 6, "127.0.0.1", "127.0.0.2", "127.0.0.3") // the same on every replica's address
	serve, admin, boot := ports[0], ports[1], ports[2]
	prefill, decode1, decode2 := ports[3], ports[4], ports[5]
	c := &cluster{t: t, bin: bin, dir: dir, client: http.Client{Timeout: 10 * time.Second}}

	c.start("decode-1", "mock", "--role", "decode", "--port", strconv.Itoa(decode1), "--token-delay", "0", "--output-len", "4")
	c.start("decode-2", "mock", "--role", "decode", "--port", strconv.Itoa(decode2), "--token-delay", "0", "--output-len", "4")
	replicas := make([]*replica, 3)
	for i := range replicas {
		host := fmt.Sprintf("127.0.0.%d", i+1)
		replicas[i] = &replica{host: host, serve: fmt.Sprintf("http://%s:%d", host, serve), admin: fmt.Sprintf("http://%s:%d", host, admin),
			config: c.write(fmt.Sprintf("replica-%d.yaml", i+1), fmt.Sprintf(replicaYAML, host, serve, host, admin, host, host,
				prefill, boot, decode1, etcd.Endpoint()))}
		replicas[i].proc = c.start(fmt.Sprintf("replica-%d", i+1), "serve", "-c", replicas[i].config)
	}
	r1, r2, r3 := replicas[0], replicas[1], replicas[2]
	for _, r := range replicas {
		c.waitFor(10*time.Second, r.host+" listening", func() bool { code, _ := c.get(r.serve + "/liveness"); return code == 200 })
	}

	// The prefill registers its two ranks with replica 1 only.
	c.start("prefill", "mock", "--role", "prefill", "--port", strconv.Itoa(prefill), "--token-delay", "0", "--tp", "2",
		"--bootstrap", fmt.Sprintf("http://127.0.0.1:%d", boot))
	sentinel := fmt.Sprintf("http://127.0.0.2:%d/route?prefill_dp_rank=-1&prefill_cp_rank=-1&target_tp_rank=-1&target_pp_rank=-1", boot)
	c.waitFor(10*time.Second, "replica 2's registry answers the sentinel", func() bool { code, _ := c.get(sentinel); return code == 200 })
	for _, r := range []*replica{r2, r3} {
		c.waitFor(10*time.Second, r.host+" ready", func() bool { code, _ := c.get(r.serve + "/readiness"); return code == 200 })
		for range 5 {
			c.generate(r) // the decode looks the prefill up at r's registry
		}
	}

	// A decode added on replica 3 is served by replica 1 within a second.
	added := time.Now()
	if code, body := c.send("POST", r3.admin+"/workers", fmt.Sprintf(`{"role":"decode","url":"http://127.0.0.1:%d"}`, decode2)); code != 201 {
		t.Fatalf("POST /workers on replica 3: %d %s", code, body)
	}
	c.waitFor(time.Second, "replica 1 lists the decode added on replica 3", func() bool {
		return r1.worker(c, decode2) != nil
	})
	t.Logf("replica 1 had the decode added on replica 3 after %s", time.Since(added).Round(time.Millisecond))
	for i := 0; r1.worker(c, decode2).Selected == 0; i++ {
		if i == 50 {
			t.Fatal("replica 1 never sent a request to the decode added on replica 3")
		}
		c.generate(r1)
	}

	// SIGKILL replica 1, which took the registration: nothing is lost.
	if err := r1.proc.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r1.proc.Wait()
	for _, r := range []*replica{r2, r3} {
		if code, body := c.get(r.serve + "/readiness"); code != 200 {
			t.Fatalf("%s readiness after replica 1 was killed: %d %s", r.host, code, body)
		}
		if r.worker(c, decode2) == nil {
			t.Fatalf("%s lost the decode added on replica 3", r.host)
		}
		c.generate(r)
	}
	// A new replica 1 comes up with all of it from etcd.
	r1.proc = c.start("replica-1-again", "serve", "-c", r1.config)
	c.waitFor(10*time.Second, "replica 1 ready again", func() bool { code, _ := c.get(r1.serve + "/readiness"); return code == 200 })
	c.waitFor(5*time.Second, "replica 1 has the shared decode again", func() bool { return r1.worker(c, decode2) != nil })
	c.generate(r1)

	// etcd stops and comes back: no request fails meanwhile.
	var sent, failed atomic.Int64
	var lastFailure atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			code, body := c.post(replicas[i%3].serve+"/generate", `{"text":"during the outage"}`)
			sent.Add(1)
			if code != 200 {
				failed.Add(1)
				lastFailure.Store(fmt.Sprintf("%s: %d %s", replicas[i%3].host, code, body))
			}
		}
	})
	etcd.Stop()
	c.waitFor(10*time.Second, "replica 2 reports etcd down", func() bool { return r2.storeUp(c) == "0" })
	if code, body := c.send("POST", r2.admin+"/workers", `{"role":"decode","url":"http://127.0.0.1:1"}`); code != 503 {
		t.Fatalf("POST /workers with etcd down: %d %s, want 503", code, body)
	}
	etcd.Start()
	for _, r := range replicas {
		c.waitFor(15*time.Second, r.host+" reports etcd up again", func() bool { return r.storeUp(c) == "1" })
	}
	close(stop)
	wg.Wait()
	if failed.Load() != 0 || sent.Load() < 10 {
		t.Fatalf("during the etcd outage %d of %d requests failed (last: %v)", failed.Load(), sent.Load(), lastFailure.Load())
	}
	t.Logf("%d requests through the three replicas during the etcd outage, none failed", sent.Load())
	if code, body := c.send("POST", r2.admin+"/workers", `{"role":"decode","url":"http://127.0.0.1:1"}`); code != 201 {
		t.Fatalf("POST /workers after etcd is back: %d %s", code, body)
	}
}

const replicaYAML = `
server: {host: %s, port: %d}
admin: {host: %s, port: %d}
bootstrap: {mode: embedded, listen_host: %s, advertise_host: %s}
prefill:
  - {url: "http://127.0.0.1:%d", bootstrap_port: %d}
decode:
  - {url: "http://127.0.0.1:%d"}
health: {interval: 200ms}
log: {level: warn}
cluster:
  etcd:
    endpoints: [%s]
    request_timeout: 1s
    lease_ttl: 3s
`

// cluster runs the test's processes, each logging to a file that is shown
// when the test fails.
type cluster struct {
	t      *testing.T
	bin    string
	dir    string
	client http.Client
}

type replica struct {
	host, serve, admin, config string
	proc                       *exec.Cmd
}

func (c *cluster) write(name, body string) string {
	p := filepath.Join(c.dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		c.t.Fatal(err)
	}
	return p
}

func (c *cluster) start(name string, args ...string) *exec.Cmd {
	c.t.Helper()
	logPath := filepath.Join(c.dir, name+".log")
	log, err := os.Create(logPath)
	if err != nil {
		c.t.Fatal(err)
	}
	cmd := exec.Command(c.bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		log.Close()
		if c.t.Failed() {
			out, _ := os.ReadFile(logPath)
			c.t.Logf("--- %s (pdlb %s):\n%s", name, strings.Join(args, " "), out)
		}
	})
	return cmd
}

// waitFor polls cond until the deadline (never a sleep as an assertion).
func (c *cluster) waitFor(d time.Duration, what string, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("not within %s: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *cluster) send(method, url, body string) (int, string) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (c *cluster) get(url string) (int, string)        { return c.send("GET", url, "") }
func (c *cluster) post(url, body string) (int, string) { return c.send("POST", url, body) }

func (c *cluster) generate(r *replica) {
	c.t.Helper()
	if code, body := c.post(r.serve+"/generate", `{"text":"hi"}`); code != 200 {
		c.t.Fatalf("POST /generate through %s: %d %s", r.host, code, body)
	}
}

type workerView struct {
	URL      string `json:"url"`
	Selected uint64 `json:"selected"`
}

// worker is the backend on port as r's admin API lists it (nil: absent).
func (r *replica) worker(c *cluster, port int) *workerView {
	code, body := c.get(r.admin + "/workers")
	if code != 200 {
		return nil
	}
	var ws []workerView
	if json.NewDecoder(bytes.NewReader([]byte(body))).Decode(&ws) != nil {
		return nil
	}
	for i := range ws {
		if strings.HasSuffix(ws[i].URL, ":"+strconv.Itoa(port)) {
			return &ws[i]
		}
	}
	return nil
}

// storeUp is r's pdlb_cluster_store_up ("" when unreadable).
func (r *replica) storeUp(c *cluster) string {
	_, body := c.get(r.serve + "/metrics")
	for line := range strings.SplitSeq(body, "\n") {
		if v, ok := strings.CutPrefix(line, "pdlb_cluster_store_up "); ok {
			return v
		}
	}
	return ""
}
