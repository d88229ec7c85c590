package router

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"pdlb/config"
	"pdlb/proxy/proxytest"
)

// TestCacheAwareFollowsPrompts: with policy cache_aware, three new prompts
// go to three different prefills (the least loaded, then the one holding
// least), and each comes back to its own; the log line carries the share
// of the prompt the chosen prefill holds.
func TestCacheAwareFollowsPrompts(t *testing.T) {
	prefills := []*proxytest.Engine{
		proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`)),
		proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`)),
		proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`)),
	}
	d := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{"text":"ok"}`))
	logs := &proxytest.SyncBuffer{}
	l := startLBWithLog(t, prefills, []*proxytest.Engine{d}, zerolog.New(logs), func(c *config.Config) {
		c.Policy = config.Default().Policy
		c.Policy.Prefill, c.Policy.Decode = "cache_aware", "cache_aware"
	})
	body := func(i int) string {
		return `{"text":"` + strings.Repeat("conversation "+strconv.Itoa(i)+" ", 100) + `"}`
	}
	for round := range 4 {
		for i := range 3 {
			if resp, _ := proxytest.Post(t, l.URL+"/generate", body(i)); resp.StatusCode != 200 {
				t.Fatalf("round %d prompt %d: status %d", round, i, resp.StatusCode)
			}
		}
	}
	// The prefill legs run beside the decode's: the last may reach its
	// engine just after the client has its answer.
	proxytest.WaitFor(2*time.Second, func() bool {
		return prefills[0].Count()+prefills[1].Count()+prefills[2].Count() == 12
	})
	for i, p := range prefills {
		if p.Count() != 4 {
			t.Errorf("prefill %d got %d requests, want its own prompt's 4", i, p.Count())
		}
	}
	if !strings.Contains(string(logs.Bytes()), `"prefill_prefix_match":0.9`) ||
		!strings.Contains(string(logs.Bytes()), `"decode_prefix_match":`) {
		t.Fatalf("the log lines do not carry the prefix match: %s", logs.Bytes())
	}
}
