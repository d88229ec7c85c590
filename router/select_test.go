package router

import (
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"pdlb/config"
	"pdlb/proxy"
	"pdlb/proxy/proxytest"
	"pdlb/router/policy"
)

func testBackends(t *testing.T, role proxy.Role, n int) []*proxy.Backend {
	t.Helper()
	out := make([]*proxy.Backend, n)
	for i := range out {
		b, err := proxy.NewBackend("http://10.0.0."+string(rune('1'+i))+":30000", role, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = b
	}
	return out
}

// TestPickPairSkipsExcludedAndRefusingBackends: a backend that failed an
// earlier attempt is not picked again, and one whose half-open breaker
// has no probe left is passed over for another.
func TestPickPairSkipsExcludedAndRefusingBackends(t *testing.T) {
	pool := proxy.NewPool(nil)
	prefills, decodes := testBackends(t, proxy.Prefill, 1), testBackends(t, proxy.Decode, 3)
	for _, b := range append(prefills, decodes...) {
		pool.Add(b)
	}
	r := New(Options{Settings: SettingsFrom(&config.Config{Policy: config.Default().Policy}), Pool: pool, Log: testLog(t)})
	// decodes[0] failed before; decodes[1] holds a breaker with its only
	// half-open probe taken.
	br := proxy.NewBreaker("d1", config.Breaker{Enabled: true, ConsecutiveFailures: 1, OpenTimeout: time.Nanosecond, HalfOpenMaxRequests: 1}, testLog(t), nil)
	decodes[1].SetBreaker(br)
	tk, _ := decodes[1].Acquire()
	tk.Done(&proxy.UpstreamError{Backend: decodes[1], Kind: proxy.KindConnect}) // opens
	time.Sleep(time.Millisecond)                                                // past open_timeout: half-open next
	probe, admitted := decodes[1].Acquire()
	if !admitted {
		t.Fatal("the half-open breaker admitted no probe")
	}
	defer probe.Release()
	for range 50 {
		pt, dt, msg := r.pickPair(&request{r: r}, []*proxy.Backend{decodes[0]})
		if msg != "" || dt.Backend() != decodes[2] || pt.Backend() != prefills[0] {
			t.Fatalf("picked %v / %v (%q), want the only admissible decode", pt.Backend(), dt.Backend(), msg)
		}
		pt.Release()
		dt.Release()
	}
	_, _, msg := r.pickPair(&request{r: r}, []*proxy.Backend{decodes[0], decodes[2]})
	if !strings.Contains(msg, "no decode backend available: all 3") {
		t.Fatalf("message %q", msg)
	}
}

// TestPoliciesFromConfig: policy.prefill and policy.decode choose the
// policies, and the request's log line names their reasons.
func TestPoliciesFromConfig(t *testing.T) {
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	d1 := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{"d":1}`))
	d2 := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{"d":2}`))
	logs := &proxytest.SyncBuffer{}
	l := startLBWithLog(t, []*proxytest.Engine{p}, []*proxytest.Engine{d1, d2}, zerolog.New(logs), func(c *config.Config) {
		c.Policy = config.Policy{Prefill: "power_of_two", Decode: "round_robin"}
	})
	var got []string
	for range 4 {
		_, body := proxytest.Post(t, l.URL+"/generate", `{"text":"hi"}`)
		got = append(got, body)
	}
	if got[0] == got[1] || got[0] != got[2] || got[1] != got[3] {
		t.Fatalf("round_robin over two decodes answered %v, want them alternating", got)
	}
	if !strings.Contains(string(logs.Bytes()), `"prefill_load":0`) {
		t.Fatalf("the log line does not name power_of_two's reason: %s", logs.Bytes())
	}
	// A reload that changes the policy takes effect.
	st := l.router.Settings()
	st.Policy.Decode = "random"
	l.router.Apply(st)
	if _, isRandom := l.router.policies.Load().decode.(policy.Random); !isRandom {
		t.Fatal("the reloaded decode policy is not random")
	}
}
