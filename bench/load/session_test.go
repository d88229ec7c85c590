package load

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
)

// chatAnswer is what chatEngine answers to a prompt: it depends on the prompt alone, holds
// characters that JSON must escape, and spans three words.
func chatAnswer(prompt string) string {
	return fmt.Sprintf("a%d said \"ok\"\nbye", len(strings.Fields(prompt)))
}

// chatEngine answers /generate with chatAnswer, as JSON or as an SSE stream whose text is
// cumulative (SGLang's default): only the last event holds the whole answer. It reports no
// prompt_tokens, so the generator counts the words it sent.
func chatEngine(ctx *fasthttp.RequestCtx) {
	body := ctx.PostBody()
	answer, _ := json.Marshal(chatAnswer(gjson.GetBytes(body, "text").String()))
	if !gjson.GetBytes(body, "stream").Bool() {
		ctx.SetContentType("application/json")
		fmt.Fprintf(ctx, `{"text":%s,"meta_info":{"completion_tokens":3,"cached_tokens":0}}`, answer)
		return
	}
	ctx.SetContentType("text/event-stream")
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		w.WriteString("data: {\"text\":\"a\",\"meta_info\":{\"completion_tokens\":1}}\n\n")
		fmt.Fprintf(w, "data: {\"text\":%s,\"meta_info\":{\"completion_tokens\":3,\"cached_tokens\":0}}\n\n", answer)
		w.WriteString("data: [DONE]\n\n")
	})
}

func TestMultiturnHistoryGrowsWithRealAnswers(t *testing.T) {
	url, rec := record(t, chatEngine)
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%t", stream), func(t *testing.T) {
			rep := runOrFail(t, Options{Targets: []string{url}, Workload: WorkloadMultiturn, Stream: stream,
				Sessions: 1, Turns: Dist{3, 3}, Requests: 3, SystemLen: 10, InputLen: Dist{4, 4}, OutputLen: Dist{3, 3}})
			rec.mu.Lock() // one session: arrival order is turn order
			bodies := rec.bodies
			rec.bodies = nil
			rec.mu.Unlock()
			if len(bodies) != 3 {
				t.Fatalf("%d requests, want 3", len(bodies))
			}
			prompts := texts(bodies)
			if w := strings.Fields(prompts[0]); len(w) != 14 || !strings.HasPrefix(w[0], "sys") {
				t.Fatalf("turn 0 %q: want 10 system words then 4 user words", prompts[0])
			}
			words := 0
			for k, p := range prompts {
				words += len(strings.Fields(p))
				if k == 0 {
					continue
				}
				// Turn k resends turn k-1's prompt, the engine's answer to it, then 4 new words.
				prefix := prompts[k-1] + " " + chatAnswer(prompts[k-1]) + " "
				rest, ok := strings.CutPrefix(p, prefix)
				if !ok {
					t.Fatalf("turn %d does not resend the history:\n got %q\nwant %q…", k, p, prefix)
				}
				if n := len(strings.Fields(rest)); n != 4 {
					t.Errorf("turn %d: new user message %q has %d words, want 4", k, rest, n)
				}
			}
			r := rep.Targets[0].Median
			if r.Completed != 3 || r.PromptTokens != int64(words) {
				t.Errorf("completed %d, prompt tokens %d; want 3 and %d (the words sent)", r.Completed, r.PromptTokens, words)
			}
		})
	}
}

// What is sent depends on the answers, never on how many sessions run at once.
func TestMultiturnReproducibleWhateverTheSessions(t *testing.T) {
	url, rec := record(t, chatEngine)
	base := Options{Targets: []string{url}, Workload: WorkloadMultiturn, Requests: 40, Turns: Dist{1, 5},
		SystemPrompts: 3, SystemLen: 6, InputLen: Dist{2, 5}, OutputLen: Dist{3, 3}, Seed: 9}
	one, many := base, base
	one.Sessions, many.Sessions = 1, 7
	runOrFail(t, one)
	a := rec.take()
	runOrFail(t, many)
	b := rec.take()
	if len(a) != 40 || !slices.Equal(a, b) {
		t.Fatalf("1 and 7 sessions sent different bodies (%d and %d)", len(a), len(b))
	}
	turns := map[string]int{} // session → turns sent, from the user tags u<salt>.<session>.<turn>
	for _, p := range texts(a) {
		for _, w := range strings.Fields(p) {
			if parts := strings.Split(w, "."); len(parts) == 3 && strings.HasPrefix(w, "u") {
				turns[parts[1]] = max(turns[parts[1]], 1+int(parts[2][0]-'0'))
			}
		}
	}
	lengths := map[int]bool{}
	for _, n := range turns {
		lengths[n] = true
	}
	if len(lengths) < 3 {
		t.Errorf("turns 1-5 gave sessions of %d distinct lengths (%v), want several", len(lengths), turns)
	}
}

// Closed loop keeps Sessions open at once: the engine holds the first requests until
// three are in flight, which happens only if three sessions run side by side.
func TestMultiturnKeepsSessionsOpen(t *testing.T) {
	var inFlight, most atomic.Int64
	var once sync.Once
	three := make(chan struct{})
	url := serve(t, func(ctx *fasthttp.RequestCtx) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		if n == 3 {
			once.Do(func() { close(three) })
		}
		select {
		case <-three:
		case <-time.After(5 * time.Second):
		}
		chatEngine(ctx)
	})
	rep := runOrFail(t, Options{Targets: []string{url}, Workload: WorkloadMultiturn, Sessions: 3, Turns: Dist{2, 2},
		Requests: 12, SystemLen: 4, InputLen: Dist{2, 2}, OutputLen: Dist{3, 3}})
	select {
	case <-three:
	default:
		t.Fatal("three requests were never in flight at once")
	}
	if m := most.Load(); m != 3 {
		t.Errorf("at most %d requests in flight, want 3 (one per session)", m)
	}
	if r := rep.Targets[0].Median; r.Completed != 12 {
		t.Errorf("completed %d, want 12", r.Completed)
	}
	if c := rep.Config; c.Sessions != 3 || c.Concurrency != 3 || c.Turns != (Dist{2, 2}) || c.Workload != WorkloadMultiturn {
		t.Errorf("config echo: %+v", c)
	}
}

func TestMultiturnThinkTime(t *testing.T) {
	url := serve(t, chatEngine)
	var mu sync.Mutex
	var waits []time.Duration
	o := Options{Targets: []string{url}, Workload: WorkloadMultiturn, Sessions: 1, Turns: Dist{3, 3}, Requests: 3,
		ThinkTime: 7 * time.Second, SystemLen: 2, InputLen: Dist{1, 1}, OutputLen: Dist{3, 3}}
	o.sleep = func(_ context.Context, d time.Duration) error {
		mu.Lock()
		waits = append(waits, d)
		mu.Unlock()
		return nil
	}
	start := time.Now()
	runOrFail(t, o)
	if len(waits) != 2 {
		t.Fatalf("waited %v, want twice (between 3 turns)", waits)
	}
	for _, d := range waits {
		if d <= 6*time.Second || d > 7*time.Second {
			t.Errorf("waited %v, want the 7s think time less the few ms since the answer", d)
		}
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("the run took %v: think time should go through the injected sleep", el)
	}
}

// A failed turn ends its session (there is no answer to build on); its unsent turns go
// back to the budget, so a run of Requests still sends that many.
func TestMultiturnFailedTurnEndsSession(t *testing.T) {
	var hits atomic.Int64
	url, rec := record(t, func(ctx *fasthttp.RequestCtx) {
		hits.Add(1)
		if strings.Contains(gjson.GetBytes(ctx.PostBody(), "text").String(), ".0.1 ") { // session 0, turn 1
			ctx.SetStatusCode(fasthttp.StatusInternalServerError)
			return
		}
		chatEngine(ctx)
	})
	rep := runOrFail(t, Options{Targets: []string{url}, Workload: WorkloadMultiturn, Sessions: 1, Turns: Dist{3, 3},
		Requests: 6, SystemLen: 2, InputLen: Dist{2, 2}, OutputLen: Dist{3, 3}})
	if n := hits.Load(); n != 6 {
		t.Errorf("engine saw %d requests, want 6", n)
	}
	for _, p := range texts(rec.take()) {
		if strings.Contains(p, ".0.2 ") {
			t.Errorf("session 0 went on after its failed turn: %q", p)
		}
	}
	if r := rep.Targets[0].Median; r.Completed != 5 || r.Errors["status_500"] != 1 {
		t.Errorf("completed %d, errors %v; want 5 and one status_500", r.Completed, r.Errors)
	}
}

// Open loop: sessions arrive at Rate; Scheduled counts the arrivals, Dropped those that
// found every session slot taken, and the turns still add up to Requests.
func TestMultiturnOpenLoop(t *testing.T) {
	url := serve(t, chatEngine)
	rep := runOrFail(t, Options{Targets: []string{url}, Workload: WorkloadMultiturn, Rate: 400, Sessions: 4,
		Turns: Dist{2, 2}, Requests: 20, SystemLen: 2, InputLen: Dist{1, 1}, OutputLen: Dist{3, 3}})
	r := rep.Targets[0].Median
	if r.Completed != 20 || r.Scheduled-r.Dropped != 10 {
		t.Errorf("completed %d, scheduled %d, dropped %d; want 20 requests from 10 sessions", r.Completed, r.Scheduled, r.Dropped)
	}
	var sb strings.Builder
	rep.WriteTable(&sb)
	if want := "open loop, 400 sessions/s, at most 4 open"; !strings.Contains(sb.String(), want) {
		t.Errorf("table lacks %q:\n%s", want, sb.String())
	}
}

func TestMultiturnStopsAtDuration(t *testing.T) {
	url := serve(t, chatEngine)
	start := time.Now()
	rep := runOrFail(t, Options{Targets: []string{url}, Workload: WorkloadMultiturn, Sessions: 4, Duration: 150 * time.Millisecond,
		SystemLen: 2, InputLen: Dist{1, 1}, OutputLen: Dist{3, 3}})
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("a 150 ms round took %v", el)
	}
	if r := rep.Targets[0].Median; r.Completed == 0 || r.Failed != 0 {
		t.Errorf("completed %d, failed %d", r.Completed, r.Failed)
	}
}

func TestMultiturnOptionsRejected(t *testing.T) {
	target := []string{"http://127.0.0.1:1"}
	for name, o := range map[string]Options{
		"sessions without multiturn": {Targets: target, Workload: WorkloadShared, Sessions: 2},
		"turns without multiturn":    {Targets: target, Turns: Dist{2, 2}},
		"think without multiturn":    {Targets: target, Workload: WorkloadUnique, ThinkTime: time.Second},
		"concurrency with sessions":  {Targets: target, Workload: WorkloadMultiturn, Concurrency: 8},
		"zero turns":                 {Targets: target, Workload: WorkloadMultiturn, Turns: Dist{0, 3}},
		"negative think time":        {Targets: target, Workload: WorkloadMultiturn, ThinkTime: -time.Second},
	} {
		if _, err := Run(context.Background(), o); err == nil {
			t.Errorf("%s: Run accepted %+v", name, o)
		}
	}
}

func TestCountWordsLikeFields(t *testing.T) {
	for _, s := range []string{"", " ", "a", " a  b\tc\n", "said \"ok\"\nbye", "x\u00a0y\u3000z", "é è"} {
		if got, want := countWords(s), len(strings.Fields(s)); got != want {
			t.Errorf("countWords(%q) = %d, want %d", s, got, want)
		}
	}
}

// TestMultiturnSendsSessionID: every turn of a session carries the same
// X-Session-ID, distinct from other sessions', so a sticky balancer can
// keep a session on one engine; the other workloads send none.
func TestMultiturnSendsSessionID(t *testing.T) {
	var mu sync.Mutex
	turns := map[string]int{} // session ID → turns seen
	url := serve(t, func(ctx *fasthttp.RequestCtx) {
		mu.Lock()
		turns[string(ctx.Request.Header.Peek(HeaderSessionID))]++
		mu.Unlock()
		chatEngine(ctx)
	})
	runOrFail(t, Options{Targets: []string{url}, Workload: WorkloadMultiturn, Sessions: 2, Turns: Dist{3, 3},
		Requests: 12, SystemLen: 4, InputLen: Dist{2, 2}, OutputLen: Dist{3, 3}})
	mu.Lock()
	if len(turns) != 4 || turns[""] != 0 {
		t.Fatalf("requests per session ID %v, want 4 sessions of 3 turns", turns)
	}
	for id, n := range turns {
		if n != 3 {
			t.Fatalf("session %q sent %d turns, want 3", id, n)
		}
	}
	clear(turns)
	mu.Unlock()
	runOrFail(t, Options{Targets: []string{url}, Workload: WorkloadShared, Concurrency: 2, Requests: 4,
		SystemPrompts: 2, SystemLen: 4, InputLen: Dist{2, 2}, OutputLen: Dist{3, 3}})
	mu.Lock()
	defer mu.Unlock()
	if len(turns) != 1 || turns[""] != 4 {
		t.Fatalf("shared workload sent session IDs: %v", turns)
	}
}
