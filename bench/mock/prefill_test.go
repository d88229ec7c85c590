package mock

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// words returns n distinct words starting at from: "w<from> w<from+1> …".
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

func TestPrefillReportsCachedTokensOfARepeatedPrompt(t *testing.T) {
	e, url := startEngine(t, Options{Role: RolePrefill, KVCacheTokens: 1024, BlockSize: 4})
	body := `{"text":"` + words(0, 10) + `","bootstrap_room":1}` // two full blocks and two tokens
	cached := func(b []byte) any { return path(decode(t, b), "meta_info", "cached_tokens") }
	if _, b := post(t, url+"/generate", body); cached(b) != 0.0 {
		t.Errorf("first request cached_tokens %v, want 0: %s", cached(b), b)
	}
	_, b := post(t, url+"/generate", body)
	if cached(b) != 8.0 || path(decode(t, b), "meta_info", "prompt_tokens") != 10.0 {
		t.Errorf("repeat: %s; want cached_tokens 8 of prompt_tokens 10", b)
	}
	// Streams carry it too.
	_, b, _ = do(t, "POST", url+"/generate", `{"text":"`+words(0, 10)+` more","bootstrap_room":2,"stream":true}`)
	if evs := events(t, b); len(evs) != 2 || path(decode(t, []byte(evs[0])), "meta_info", "cached_tokens") != 8.0 {
		t.Errorf("stream %q", evs)
	}
	s := e.Stats()
	if s.InputTokens != 31 || s.CachedTokens != 16 || s.KVCacheTokens != 8 {
		t.Errorf("Input %d Cached %d KVCache %d; want 31, 16, 8", s.InputTokens, s.CachedTokens, s.KVCacheTokens)
	}
	// /flush_cache empties it, as SGLang's does.
	do(t, "POST", url+"/flush_cache", "")
	if _, b := post(t, url+"/generate", body); cached(b) != 0.0 {
		t.Errorf("after /flush_cache cached_tokens %v", cached(b))
	}
}

func TestOpenAIUsageReportsCachedTokens(t *testing.T) {
	_, url := startEngine(t, Options{Role: RolePrefill, KVCacheTokens: 1024, BlockSize: 2})
	chat := `{"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}],"bootstrap_room":1}`
	_, b := post(t, url+"/v1/chat/completions", chat)
	if d := path(decode(t, b), "usage", "prompt_tokens_details"); d != nil {
		t.Errorf("first chat: prompt_tokens_details %v, want null", d)
	}
	// "system: be brief user: hi" is 5 tokens: two blocks of 2 are cached.
	_, b = post(t, url+"/v1/chat/completions", chat)
	if d := path(decode(t, b), "usage", "prompt_tokens_details", "cached_tokens"); d != 4.0 {
		t.Errorf("repeated chat: %s; want usage.prompt_tokens_details.cached_tokens 4", b)
	}
	// Completions with n=2: the prompt is counted once, cached once.
	_, b = post(t, url+"/v1/completions", `{"prompt":"`+words(0, 6)+`","n":2,"bootstrap_room":5}`)
	v := decode(t, b)
	if path(v, "usage", "prompt_tokens") != 6.0 || path(v, "usage", "prompt_tokens_details") != nil {
		t.Errorf("first completion usage %v", path(v, "usage"))
	}
	_, b = post(t, url+"/v1/completions", `{"prompt":"`+words(0, 6)+`","n":2,"bootstrap_room":7}`)
	if d := path(decode(t, b), "usage", "prompt_tokens_details", "cached_tokens"); d != 6.0 {
		t.Errorf("repeated completion usage %v", path(decode(t, b), "usage"))
	}
}

func TestPrefillSlotsQueue(t *testing.T) {
	// 2000 tokens × 1ms × 0.1 = 200ms per prefill.
	const each = 200 * time.Millisecond
	opts := Options{Role: RolePrefill, PrefillPerToken: time.Millisecond, TimeScale: 0.1}
	ids := strings.TrimSuffix(strings.Repeat("7,", 2000), ",")
	run := func(urls ...string) time.Duration {
		start := time.Now()
		var wg sync.WaitGroup
		for i, u := range urls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if status, b := post(t, u+"/generate", fmt.Sprintf(`{"input_ids":[%s],"bootstrap_room":%d}`, ids, i)); status != 200 {
					t.Errorf("status %d: %s", status, b)
				}
			}()
		}
		wg.Wait()
		return time.Since(start)
	}
	one, url := startEngine(t, opts)
	serial := run(url, url)
	e1, url1 := startEngine(t, opts)
	e2, url2 := startEngine(t, opts)
	run(url1, url2)
	if serial < 2*each {
		t.Errorf("two prefills on one engine took %v, less than two prefills (%v)", serial, 2*each)
	}
	s := one.Stats().PrefillSlots
	if s.PeakRunning != 1 || s.PeakQueued != 1 || s.Busy < 2*each {
		t.Errorf("one engine's prefill slots: %+v; want peak 1 running, 1 queued, busy ≥ %v", s, 2*each)
	}
	// Two engines, one prefill each: neither queues. (What the slots count,
	// not wall time, which a loaded machine stretches.)
	for i, e := range []*Engine{e1, e2} {
		if s := e.Stats().PrefillSlots; s.PeakRunning != 1 || s.PeakQueued != 0 || s.Busy < each {
			t.Errorf("engine %d of two: prefill slots %+v; want peak 1 running, none queued, busy ≥ %v", i+1, s, each)
		}
	}
}

func TestPrefillTimeIsForUncachedTokens(t *testing.T) {
	e := New(Options{Role: RolePrefill, PrefillPerToken: 2 * time.Millisecond, PrefillOverhead: 5 * time.Millisecond, TimeScale: 0.5}, nopLog())
	if got, want := e.prefillDuration(100), (5*time.Millisecond+200*time.Millisecond)/2; got != want {
		t.Errorf("prefill of 100 uncached tokens %v, want %v", got, want)
	}
	if got := e.prefillDuration(0); got != 2500*time.Microsecond {
		t.Errorf("fully cached prefill %v, want the overhead (scaled) 2.5ms", got)
	}
}

func TestPrefillCountsTheUpperBound(t *testing.T) {
	seen := NewPrefixSet(4)
	o := Options{Role: RolePrefill, KVCacheTokens: 1024, BlockSize: 4, Seen: seen}
	a, urlA := startEngine(t, o)
	b, urlB := startEngine(t, o)
	sys := words(0, 8) // two blocks every prompt below starts with
	post(t, urlA+"/generate", `{"text":"`+sys+` `+words(100, 4)+`","bootstrap_room":1}`)
	// On B nothing is cached, but A had the first two blocks: an ideal
	// router would have found 8 tokens.
	_, body := post(t, urlB+"/generate", `{"text":"`+sys+` `+words(200, 4)+`","bootstrap_room":2}`)
	if got := path(decode(t, body), "meta_info", "cached_tokens"); got != 0.0 {
		t.Errorf("B cached_tokens %v", got)
	}
	post(t, urlA+"/generate", `{"text":"`+sys+` `+words(200, 4)+`","bootstrap_room":3}`)
	sa, sb := a.Stats(), b.Stats()
	// A: 12 + 12 tokens, cached 0 + 8, best 0 + 12 (B's whole prompt).
	if sa.InputTokens != 24 || sa.CachedTokens != 8 || sa.BestCachedTokens != 12 {
		t.Errorf("A: input %d cached %d best %d; want 24, 8, 12", sa.InputTokens, sa.CachedTokens, sa.BestCachedTokens)
	}
	if sb.InputTokens != 12 || sb.CachedTokens != 0 || sb.BestCachedTokens != 8 {
		t.Errorf("B: input %d cached %d best %d; want 12, 0, 8", sb.InputTokens, sb.CachedTokens, sb.BestCachedTokens)
	}
}

func TestResetStats(t *testing.T) {
	e, url := startEngine(t, Options{Role: RolePrefill, KVCacheTokens: 64, BlockSize: 2})
	post(t, url+"/generate", `{"text":"a b c d","bootstrap_room":1}`)
	post(t, url+"/generate", `{"text":"a b c d","bootstrap_room":2}`)
	e.ResetStats()
	s := e.Stats()
	if len(s.Requests) != 0 || s.InputTokens != 0 || s.CachedTokens != 0 || s.OutputTokens != 0 ||
		len(s.Bodies) != 0 || s.MaxInFlight != 0 || s.Batch.Held != 0 {
		t.Errorf("after ResetStats: %+v", s)
	}
	if s.KVCacheTokens != 4 {
		t.Errorf("ResetStats emptied the KV cache: %d tokens", s.KVCacheTokens)
	}
	e.FlushCache()
	if s := e.Stats(); s.KVCacheTokens != 0 {
		t.Errorf("after FlushCache %d tokens", s.KVCacheTokens)
	}
}
