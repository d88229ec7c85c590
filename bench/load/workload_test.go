package load

import (
	"context"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
)

// recorder serves h and keeps every body it was sent.
type recorder struct {
	mu     sync.Mutex
	bodies []string
}

func record(t *testing.T, h fasthttp.RequestHandler) (string, *recorder) {
	rec := &recorder{}
	url := serve(t, func(ctx *fasthttp.RequestCtx) {
		rec.mu.Lock()
		rec.bodies = append(rec.bodies, string(ctx.PostBody()))
		rec.mu.Unlock()
		h(ctx)
	})
	return url, rec
}

// take returns the bodies seen so far, sorted (arrival order depends on timing), and forgets them.
func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.bodies
	r.bodies = nil
	slices.Sort(out)
	return out
}

// texts returns the "text" of each body.
func texts(bodies []string) []string {
	var out []string
	for _, b := range bodies {
		out = append(out, gjson.Get(b, "text").String())
	}
	return out
}

func runOrFail(t *testing.T, o Options) *Report {
	t.Helper()
	rep, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestWorkloadsReproducibleWhateverTheConcurrency(t *testing.T) {
	url, rec := record(t, engine(0))
	for _, wl := range []string{WorkloadShared, WorkloadUnique} {
		t.Run(wl, func(t *testing.T) {
			base := Options{
				Targets: []string{url}, Workload: wl, Requests: 150, SystemLen: 20,
				InputLen: Dist{3, 9}, OutputLen: Dist{1, 4}, Seed: 5,
			}
			one, many := base, base
			one.Concurrency, many.Concurrency = 1, 9
			runOrFail(t, one)
			a := rec.take()
			runOrFail(t, many)
			b := rec.take()
			if len(a) != 150 || !slices.Equal(a, b) {
				t.Fatalf("concurrency 1 and 9 sent different bodies (%d and %d)", len(a), len(b))
			}
			other := many
			other.Seed = 6
			runOrFail(t, other)
			if c := rec.take(); slices.Equal(a, c) {
				t.Error("seeds 5 and 6 sent the same bodies")
			}
		})
	}
}

// Request i of shared and of unique have the same length under one seed, so the two compare.
func TestSharedAndUniqueHaveTheSameLengths(t *testing.T) {
	url, rec := record(t, engine(0))
	lengths := func(wl string) []int {
		runOrFail(t, Options{Targets: []string{url}, Workload: wl, Requests: 60, Concurrency: 1, SystemLen: 30, InputLen: Dist{1, 40}})
		rec.mu.Lock() // concurrency 1: arrival order is request order
		defer rec.mu.Unlock()
		var out []int
		for _, txt := range texts(rec.bodies) {
			out = append(out, len(strings.Fields(txt)))
		}
		rec.bodies = nil
		return out
	}
	shared, unique := lengths(WorkloadShared), lengths(WorkloadUnique)
	if len(shared) != 60 || !slices.Equal(shared, unique) {
		t.Errorf("prompt lengths differ:\nshared %v\nunique %v", shared, unique)
	}
	if slices.Min(shared) == slices.Max(shared) {
		t.Errorf("input length 1-40 drew one length only: %v", shared)
	}
}

func TestUniquePromptsShareNoFirstWord(t *testing.T) {
	url, rec := record(t, engine(0))
	rep := runOrFail(t, Options{Targets: []string{url}, Workload: WorkloadUnique, Requests: 500, Concurrency: 4, SystemLen: 10, InputLen: Dist{5, 5}})
	first := map[string]bool{}
	for _, txt := range texts(rec.take()) {
		w := strings.Fields(txt)
		if len(w) != 15 {
			t.Fatalf("prompt has %d words, want 10 + 5: %q", len(w), txt)
		}
		if first[w[0]] {
			t.Fatalf("first word %q sent twice", w[0])
		}
		first[w[0]] = true
	}
	if len(first) != 500 {
		t.Errorf("%d distinct first words, want 500", len(first))
	}
	if c := rep.Config; c.Workload != WorkloadUnique || c.SystemLen != 10 || c.SystemPrompts != 0 {
		t.Errorf("config echo: %+v", c)
	}
}

// Shared prompts are one of the system prompts followed by a user message whose first
// word no other request has; everything else is common to the requests of one rank.
func TestSharedPromptsAreSystemPromptThenUniqueMessage(t *testing.T) {
	url, rec := record(t, engine(0))
	runOrFail(t, Options{Targets: []string{url}, Workload: WorkloadShared, Requests: 300, Concurrency: 4,
		SystemPrompts: 5, SystemLen: 12, InputLen: Dist{4, 4}})
	system := map[string]string{} // first word → the system prompt it starts
	users := map[string]bool{}
	for _, txt := range texts(rec.take()) {
		w := strings.Fields(txt)
		if len(w) != 16 || !strings.HasPrefix(w[0], "sys") {
			t.Fatalf("prompt %q: want 12 system words starting with sys…, then 4", txt)
		}
		sys := strings.Join(w[:12], " ")
		if prev, ok := system[w[0]]; ok && prev != sys {
			t.Fatalf("two system prompts start with %s:\n%s\n%s", w[0], prev, sys)
		}
		system[w[0]] = sys
		if users[w[12]] {
			t.Fatalf("user message start %q sent twice", w[12])
		}
		users[w[12]] = true
	}
	if len(system) != 5 {
		t.Errorf("%d system prompts seen in 300 requests, want all 5", len(system))
	}
}

// Two targets in one round get the same shapes (the system prompt picked, the lengths)
// but not the same unique words: on shared engines, the second would find the first's cached.
func TestTargetsGetSameShapesNotSameUniqueWords(t *testing.T) {
	a, recA := record(t, engine(0))
	b, recB := record(t, engine(0))
	runOrFail(t, Options{Targets: []string{a, b}, Rounds: 1, Workload: WorkloadShared, Requests: 40, Concurrency: 1,
		SystemLen: 8, InputLen: Dist{2, 6}})
	ta, tb := texts(recA.bodies), texts(recB.bodies)
	if len(ta) != 40 || len(tb) != 40 {
		t.Fatalf("%d and %d requests", len(ta), len(tb))
	}
	for i := range ta {
		wa, wb := strings.Fields(ta[i]), strings.Fields(tb[i])
		if len(wa) != len(wb) || strings.Join(wa[:8], " ") != strings.Join(wb[:8], " ") {
			t.Fatalf("request %d: shapes differ:\nA %q\nB %q", i, ta[i], tb[i])
		}
		if wa[8] == wb[8] {
			t.Fatalf("request %d: both targets got user word %q", i, wa[8])
		}
	}
}

// The picks follow Zipf's law: with 100,000 draws over 16 ranks at s = 1.1, each rank's
// share is within 10% of k^-s/Σj^-s. For the rarest rank (about 1,550 expected) 10% is
// 4 standard deviations of a binomial count, so a correct sampler does not fail it, and a
// sampler off by 10% in any rank does.
func TestZipfFrequencies(t *testing.T) {
	const n, k, s = 100000, 16, 1.1
	z := newZipf(k, s)
	counts := make([]int, k+1)
	for i := range uint64(n) {
		counts[z.rank(splitmix64(i))]++
	}
	var norm float64
	for r := 1; r <= k; r++ {
		norm += math.Pow(float64(r), -s)
	}
	for r := 1; r <= k; r++ {
		want := math.Pow(float64(r), -s) / norm * n
		if got := float64(counts[r]); math.Abs(got-want) > 0.1*want {
			t.Errorf("rank %d drawn %d times, want %.0f ± 10%%", r, counts[r], want)
		}
	}
	if counts[0] != 0 {
		t.Errorf("rank 0 drawn %d times", counts[0])
	}
}

// End to end, the most popular system prompt is sent as often as Zipf says: with 2,000
// requests over 4 prompts at s = 1.1, rank 1's share is 0.497 (993 ± 22 requests); allow 15%.
func TestSharedSendsZipfPopularity(t *testing.T) {
	url, rec := record(t, engine(0))
	runOrFail(t, Options{Targets: []string{url}, Workload: WorkloadShared, Requests: 2000, Concurrency: 8,
		SystemPrompts: 4, SystemLen: 3, InputLen: Dist{1, 1}, OutputLen: Dist{1, 1}})
	count := map[string]int{}
	for _, txt := range texts(rec.take()) {
		count[strings.Fields(txt)[0]]++
	}
	want := 2000 / (1 + math.Pow(2, -1.1) + math.Pow(3, -1.1) + math.Pow(4, -1.1))
	if got := float64(count["sys1"]); math.Abs(got-want) > 0.15*want {
		t.Errorf("sys1 sent %v times, want %.0f ± 15%% (all: %v)", got, want, count)
	}
	if !(count["sys1"] > count["sys2"] && count["sys2"] > count["sys4"]) {
		t.Errorf("popularity not decreasing with rank: %v", count)
	}
}

func TestWorkloadOptionsRejected(t *testing.T) {
	target := []string{"http://127.0.0.1:1"}
	for name, o := range map[string]Options{
		"unknown workload":       {Targets: target, Workload: "chat"},
		"workload on openai":     {Targets: target, Workload: WorkloadShared, Route: RouteChatCompletions},
		"system prompts no load": {Targets: target, SystemPrompts: 3},
		"system len no load":     {Targets: target, SystemLen: 3},
		"zipf with unique":       {Targets: target, Workload: WorkloadUnique, ZipfS: 2},
		"prompts with unique":    {Targets: target, Workload: WorkloadUnique, SystemPrompts: 2},
		"empty user message":     {Targets: target, Workload: WorkloadShared, InputLen: Dist{0, 5}},
		"negative zipf":          {Targets: target, Workload: WorkloadShared, ZipfS: -1},
	} {
		if _, err := Run(context.Background(), o); err == nil {
			t.Errorf("%s: Run accepted %+v", name, o)
		} else if strings.Contains(err.Error(), "connection") {
			t.Errorf("%s: got as far as connecting: %v", name, err)
		}
	}
}
