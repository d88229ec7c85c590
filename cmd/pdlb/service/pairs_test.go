package service

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"pdlb/config"
	"pdlb/proxy/proxytest"
)

// TestWorkersShowAvoidedPairs: once a pair's KV transfers have failed
// breaker.pair_failures times, GET /workers shows it on both workers, and
// only on those, and the status page's data lists it.
func TestWorkersShowAvoidedPairs(t *testing.T) {
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	kv := proxytest.NewEngine(t, proxytest.JSONAnswer(500,
		`{"error":{"message":"Decode transfer failed for request rank=0 with exception KVTransferError(bootstrap_room=1): Failed to get kvcache from prefill instance, it might be dead"}}`))
	other := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{"text":"ok"}`))
	adminPort := proxytest.FreePort(t)
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{kv}, func(c *config.Config) {
		c.Admin = config.Admin{Host: "127.0.0.1", Port: adminPort}
		c.Breaker.PairFailures, c.Breaker.PairWindow, c.Breaker.PairCooldown = 1, time.Minute, time.Hour
		c.Retry.MaxAttempts = 1
		c.Decode = append(c.Decode, config.Decode{URL: other.URL})
	})
	// Until the failing decode is picked once (random policy).
	for i := 0; ; i++ {
		if i == 100 {
			t.Fatal("the failing decode was never picked")
		}
		if resp, _ := proxytest.Post(t, l.URL+"/generate", `{"text":"hi"}`); resp.StatusCode == 502 {
			break
		}
	}
	resp, body := proxytest.Get(t, "http://127.0.0.1:"+strconv.Itoa(adminPort)+"/workers")
	if resp.StatusCode != 200 {
		t.Fatalf("GET /workers: %d %s", resp.StatusCode, body)
	}
	var ws []Worker
	if err := json.Unmarshal([]byte(body), &ws); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{p.URL: kv.URL, kv.URL: p.URL, other.URL: ""}
	for _, w := range ws {
		got := ""
		if len(w.AvoidedWith) == 1 && time.Until(w.AvoidedWith[0].Until) > 50*time.Minute {
			got = w.AvoidedWith[0].URL
		} else if len(w.AvoidedWith) > 0 {
			got = "malformed"
		}
		if got != want[w.URL] {
			t.Errorf("%s %s avoided with %+v, want %q", w.Role, w.URL, w.AvoidedWith, want[w.URL])
		}
	}
	if len(ws) != 3 {
		t.Errorf("GET /workers listed %d workers, want 3:\n%s", len(ws), body)
	}

	// The status page's data shows it too.
	resp, body = proxytest.Get(t, "http://127.0.0.1:"+strconv.Itoa(adminPort)+"/status.json")
	var st statusJSON
	if err := json.Unmarshal([]byte(body), &st); resp.StatusCode != 200 || err != nil {
		t.Fatalf("GET /status.json: %d %v %s", resp.StatusCode, err, body)
	}
	if len(st.AvoidedPairs) != 1 || st.AvoidedPairs[0].Prefill != p.URL || st.AvoidedPairs[0].Decode != kv.URL ||
		st.AvoidedPairs[0].AvoidedForS < 3000 {
		t.Errorf("status.json avoided pairs %+v, want %s + %s for about an hour", st.AvoidedPairs, p.URL, kv.URL)
	}
}
