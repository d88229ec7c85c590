package sim

import (
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"pdlb/proxy/proxytest"
)

// start runs a cluster on free ports, its model a hundred times faster than
// the defaults, for the test's lifetime.
func start(t *testing.T, o Options) *Cluster {
	t.Helper()
	if o.TimeScale == 0 {
		o.TimeScale = 0.01
	}
	c, err := Start(o, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Shutdown(); err != nil {
			t.Error(err)
		}
	})
	return c
}

// words returns n distinct words from from on: "w<from> w<from+1> …".
func words(from, n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "w%d", from+i)
	}
	return b.String()
}

// generate posts a /generate body to url and returns its decoded answer.
func generate(t *testing.T, url, text string, room int) map[string]any {
	t.Helper()
	body := fmt.Sprintf(`{"text":%q,"bootstrap_room":%d,"sampling_params":{"max_new_tokens":2}}`, text, room)
	resp, b := proxytest.Post(t, url+"/generate", body)
	if resp.StatusCode != 200 {
		t.Fatalf("%s: %d %s", url, resp.StatusCode, b)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(b), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// pd sends text to prefill p and decode d at once, as pdlb does, and
// returns the decode's answer.
func pd(t *testing.T, c *Cluster, p, d int, text string, room int) map[string]any {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		generate(t, c.PrefillURLs()[p], text, room)
	}()
	v := generate(t, c.DecodeURLs()[d], text, room)
	<-done
	return v
}

func cachedTokens(v map[string]any) any {
	m, _ := v["meta_info"].(map[string]any)
	return m["cached_tokens"]
}

func TestClusterServesPDRequests(t *testing.T) {
	c := start(t, Options{Prefills: 2, Decodes: 2, BlockSize: 4})
	if len(c.PrefillURLs()) != 2 || len(c.DecodeURLs()) != 2 || c.StatsURL() == "" {
		t.Fatalf("prefills %v decodes %v stats %q", c.PrefillURLs(), c.DecodeURLs(), c.StatsURL())
	}
	text := words(0, 10)
	if got := cachedTokens(pd(t, c, 0, 1, text, 1)); got != 0.0 {
		t.Errorf("first request cached_tokens %v", got)
	}
	// The same prompt through the same prefill, another decode: the decode
	// reports what the prefill found cached (two blocks of four).
	if got := cachedTokens(pd(t, c, 0, 0, text, 2)); got != 8.0 {
		t.Errorf("repeated prompt cached_tokens %v, want 8", got)
	}
	// Through the other prefill: nothing cached there.
	if got := cachedTokens(pd(t, c, 1, 0, text, 3)); got != 0.0 {
		t.Errorf("other prefill cached_tokens %v, want 0", got)
	}
	r := c.Report()
	if r.Cluster.PrefillRequests != 3 || r.Cluster.DecodeRequests != 3 || r.Cluster.OutputTokens != 6 {
		t.Errorf("cluster %+v", r.Cluster)
	}
	if d := r.Engines[2]; d.Role != "decode" || d.CachedTokens != 8 || d.Requests != 2 {
		t.Errorf("decode 0: %+v", d)
	}
	if c.transfers.Pending() != 0 {
		t.Errorf("%d KV hand-overs left unclaimed", c.transfers.Pending())
	}
}

// The hit rate and its upper bound on a sequence worked out by hand, with
// blocks of 4 tokens. S is two blocks every prompt but the last starts with.
func TestHitRateAndUpperBoundByHand(t *testing.T) {
	c := start(t, Options{Prefills: 2, Decodes: 1, BlockSize: 4})
	S := words(0, 8)
	steps := []struct {
		prefill      int
		text         string
		cached, best int // found on that prefill; any earlier request had
	}{
		{0, S + " " + words(100, 4), 0, 0},                        // 12 tokens, first of all
		{1, S + " " + words(200, 4), 0, 8},                        // 12; S was seen on prefill 0
		{1, S + " " + words(200, 4), 12, 12},                      // 12; the same again, same prefill
		{0, S + " " + words(200, 4) + " " + words(300, 2), 8, 12}, // 14 (3 full blocks); prefill 0 holds S only
		{0, words(400, 6), 0, 0},                                  // 6; nothing shared
	}
	for i, st := range steps {
		if got := cachedTokens(generate(t, c.PrefillURLs()[st.prefill], st.text, 10+i)); got != float64(st.cached) {
			t.Errorf("step %d: cached_tokens %v, want %d", i, got, st.cached)
		}
	}
	// Input 12+12+12+14+6 = 56; cached 0+0+12+8+0 = 20; best 0+8+12+12+0 = 32.
	// Prefill 0 holds S, its first suffix, S+B's third block and D: 5 blocks.
	r := getReport(t, c)
	cl := r.Cluster
	if cl.InputTokens != 56 || cl.CachedTokens != 20 || cl.BestCachedTokens != 32 {
		t.Errorf("input %d cached %d best %d; want 56, 20, 32", cl.InputTokens, cl.CachedTokens, cl.BestCachedTokens)
	}
	if math.Abs(cl.HitRate-20.0/56) > 1e-9 || math.Abs(cl.HitRateBound-32.0/56) > 1e-9 {
		t.Errorf("hit rate %v bound %v; want %v and %v", cl.HitRate, cl.HitRateBound, 20.0/56, 32.0/56)
	}
	p0, p1 := r.Engines[0], r.Engines[1]
	if p0.Requests != 3 || p0.InputTokens != 32 || p0.CachedTokens != 8 || p0.BestCachedTokens != 12 || p0.KVCacheTokens != 20 {
		t.Errorf("prefill 0: %+v", p0)
	}
	if p1.Requests != 2 || p1.InputTokens != 24 || p1.CachedTokens != 12 || p1.BestCachedTokens != 20 || p1.KVCacheTokens != 12 {
		t.Errorf("prefill 1: %+v", p1)
	}
	if p0.Busy <= 0 || p0.Utilization <= 0 || p0.Utilization > 1 || p0.PeakRunning != 1 {
		t.Errorf("prefill 0 occupancy: %+v", p0)
	}
}

func TestResetClearsEverything(t *testing.T) {
	c := start(t, Options{Prefills: 1, Decodes: 1, BlockSize: 4})
	text := words(0, 8)
	pd(t, c, 0, 0, text, 1)
	pd(t, c, 0, 0, text, 2)
	generate(t, c.PrefillURLs()[0], text, 3) // a room no decode claims
	if r := getReport(t, c); r.Cluster.CachedTokens == 0 || r.Cluster.BestCachedTokens == 0 || c.transfers.Pending() != 1 {
		t.Fatalf("before reset: %+v, %d pending", r.Cluster, c.transfers.Pending())
	}
	resp, body := proxytest.Post(t, c.StatsURL()+"/reset", "")
	if resp.StatusCode != 200 {
		t.Fatalf("POST /reset: %d %s", resp.StatusCode, body)
	}
	r := getReport(t, c)
	for _, e := range r.Engines {
		if e.Requests != 0 || e.InputTokens != 0 || e.CachedTokens != 0 || e.OutputTokens != 0 || e.KVCacheTokens != 0 || e.PeakRunning != 0 {
			t.Errorf("after reset %s: %+v", e.Role, e)
		}
	}
	if r.Cluster != (ClusterReport{}) || c.transfers.Pending() != 0 {
		t.Errorf("after reset: %+v, %d pending", r.Cluster, c.transfers.Pending())
	}
	// Cache and upper bound start empty: the prompt is new again.
	if got := cachedTokens(pd(t, c, 0, 0, text, 4)); got != 0.0 {
		t.Errorf("cached_tokens after reset %v", got)
	}
	if r := c.Report(); r.Cluster.BestCachedTokens != 0 {
		t.Errorf("upper bound remembered a prompt across the reset: %+v", r.Cluster)
	}
	if resp, _ := proxytest.Get(t, c.StatsURL()+"/reset"); resp.StatusCode != 405 {
		t.Errorf("GET /reset: %d", resp.StatusCode)
	}
}

func TestStartUsesConsecutivePortsAndFailsCleanly(t *testing.T) {
	o := Defaults()
	base := freeBlock(o.Prefills + o.Decodes)
	if base == 0 {
		t.Skip("no free block of ports")
	}
	// The second engine's port is taken: Start fails and closes the first's.
	hold, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(base+1))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Start(Options{Prefills: 1, Decodes: 1, BasePort: base, StatsPort: -1}, zerolog.Nop())
	hold.Close()
	if err == nil || !strings.Contains(err.Error(), "engine 1") {
		t.Errorf("start over a taken port: %v", err)
	}
	if !portsFree(base, 1) {
		t.Error("a failed start left the first engine's port open")
	}
	if _, err := Start(Options{Prefills: 0, Decodes: -1}, zerolog.Nop()); err == nil {
		t.Error("a cluster without decodes started")
	}
	if _, err := Start(Options{BasePort: base, StatsPort: base + 3}, zerolog.Nop()); err == nil {
		t.Error("a stats port among the engines' was accepted")
	}
	c := start(t, Options{BasePort: base})
	want := []string{"http://127.0.0.1:" + strconv.Itoa(base), "http://127.0.0.1:" + strconv.Itoa(base+4)}
	if c.PrefillURLs()[0] != want[0] || c.DecodeURLs()[0] != want[1] || c.StatsURL() != "http://127.0.0.1:"+strconv.Itoa(base+100) {
		t.Errorf("prefills %v decodes %v stats %s", c.PrefillURLs(), c.DecodeURLs(), c.StatsURL())
	}
}

// freeBlock finds n consecutive free ports and base+100 free too (0: none).
func freeBlock(n int) int {
	for p := 20000; p < 60000; p += 211 {
		if portsFree(p, n) && portsFree(p+100, 1) {
			return p
		}
	}
	return 0
}

func portsFree(from, n int) bool {
	for p := from; p < from+n; p++ {
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			return false
		}
		ln.Close()
	}
	return true
}

func TestDefaults(t *testing.T) {
	d := Defaults()
	if d.Prefills != 4 || d.Decodes != 4 || d.PrefillSlots != 1 || d.KVCacheTokens != 65536 || d.BlockSize != 16 ||
		d.MaxBatch != 64 || d.OutputLen != 64 || d.TimeScale != 0.2 || d.StatsPort != 0 {
		t.Errorf("defaults %+v", d)
	}
	if o := (Options{BasePort: 30000}).withDefaults(); o.StatsPort != 30100 {
		t.Errorf("stats port %d, want base + 100", o.StatsPort)
	}
}

// getReport reads GET /stats.
func getReport(t *testing.T, c *Cluster) Report {
	t.Helper()
	resp, body := proxytest.Get(t, c.StatsURL()+"/stats")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /stats: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var r Report
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatalf("GET /stats: %v: %s", err, body)
	}
	return r
}

// TestShutdownRightAfterStart: a cluster shut down before its engines'
// Serve goroutines have run still stops (it hung: fasthttp's Shutdown
// closes only the listeners its Serve has taken, and the late Serve then
// served for ever while Shutdown waited for it).
func TestShutdownRightAfterStart(t *testing.T) {
	for range 30 {
		c, err := Start(Options{TimeScale: 0.01}, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- c.Shutdown() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("Shutdown right after Start did not return")
		}
	}
}
