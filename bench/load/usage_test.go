package load

import (
	"bufio"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
)

func TestAnswerUsage(t *testing.T) {
	for _, tc := range []struct {
		name, answer string
		want         usage
	}{
		{"sglang json", `{"text":"a b","output_ids":[1,2],"meta_info":{"prompt_tokens":40,"completion_tokens":2,"cached_tokens":32}}`,
			usage{completion: 2, prompt: 40, cached: 32, hasCached: true}},
		{"sglang zero cached", `{"text":"a","meta_info":{"prompt_tokens":5,"completion_tokens":1,"cached_tokens":0}}`,
			usage{completion: 1, prompt: 5, hasCached: true}},
		{"sglang without cache report", `{"text":"a","meta_info":{"prompt_tokens":5,"completion_tokens":1}}`,
			usage{completion: 1, prompt: 5}},
		{"openai with details", `{"choices":[{"text":"x"}],"usage":{"prompt_tokens":100,"completion_tokens":7,"total_tokens":107,"prompt_tokens_details":{"cached_tokens":64}}}`,
			usage{completion: 7, prompt: 100, cached: 64, hasCached: true}},
		{"openai without details", `{"choices":[],"usage":{"prompt_tokens":100,"completion_tokens":7,"prompt_tokens_details":null}}`,
			usage{completion: 7, prompt: 100}},
		{"nothing", `{"text":"a"}`, usage{}},
		{"not an object", `[1,2]`, usage{}},
	} {
		if got := answerUsage([]byte(tc.answer)); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// cachingEngine answers every route the way the simulated engines will: the prompt is
// counted in words and the first half of it is reported as cached. With stream, the
// totals come in the last event only, as SGLang sends them.
func cachingEngine(ctx *fasthttp.RequestCtx) {
	body := ctx.PostBody()
	r := gjson.GetManyBytes(body, "text", "prompt", "messages.0.content")
	words := len(strings.Fields(r[0].String() + r[1].String() + r[2].String()))
	cached := words / 2
	openai := !r[0].Exists()
	if !gjson.GetBytes(body, "stream").Bool() {
		ctx.SetContentType("application/json")
		if openai {
			fmt.Fprintf(ctx, `{"choices":[{"text":"ok"}],"usage":{"prompt_tokens":%d,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":%d}}}`, words, cached)
			return
		}
		fmt.Fprintf(ctx, `{"text":"ok","meta_info":{"prompt_tokens":%d,"completion_tokens":1,"cached_tokens":%d}}`, words, cached)
		return
	}
	ctx.SetContentType("text/event-stream")
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		if openai {
			w.WriteString("data: {\"choices\":[{\"text\":\"ok\"}]}\n\n")
			fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":1,\"prompt_tokens_details\":{\"cached_tokens\":%d}}}\n\n", words, cached)
		} else {
			w.WriteString("data: {\"text\":\"o\",\"meta_info\":{\"completion_tokens\":1}}\n\n")
			fmt.Fprintf(w, "data: {\"text\":\"ok\",\"meta_info\":{\"prompt_tokens\":%d,\"completion_tokens\":1,\"cached_tokens\":%d}}\n\n", words, cached)
		}
		w.WriteString("data: [DONE]\n\n")
	})
}

func TestRunReportsCachedTokens(t *testing.T) {
	url := serve(t, cachingEngine)
	for _, route := range []string{RouteGenerate, RouteCompletions, RouteChatCompletions} {
		for _, stream := range []bool{false, true} {
			rep, err := Run(context.Background(), Options{
				Targets: []string{url}, Route: route, Stream: stream, Requests: 10, Concurrency: 3,
				InputLen: Dist{20, 20}, OutputLen: Dist{1, 1},
			})
			if err != nil {
				t.Fatal(err)
			}
			r := rep.Targets[0].Median
			if r.PromptTokens != 200 || r.CachedTokens != 100 || r.CachedAnswers != 10 || r.CacheHitRate != 0.5 {
				t.Errorf("%s stream=%t: prompt %d cached %d answers %d rate %g; want 200, 100, 10, 0.5",
					route, stream, r.PromptTokens, r.CachedTokens, r.CachedAnswers, r.CacheHitRate)
			}
		}
	}
}

// An engine that reports neither prompt nor cached tokens: the prompt is counted in the
// words sent, and the table leaves the cache rows out rather than print a hit rate of 0.
func TestPromptTokensCountedWhenEngineIsSilent(t *testing.T) {
	url := serve(t, func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/json")
		ctx.WriteString(`{"text":"ok"}`)
	})
	rep, err := Run(context.Background(), Options{Targets: []string{url}, Requests: 4, Concurrency: 2, InputLen: Dist{7, 7}})
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Targets[0].Median
	if r.PromptTokens != 28 || r.CachedAnswers != 0 || r.CacheHitRate != 0 {
		t.Errorf("prompt %d, cached answers %d, rate %g; want 28, 0, 0", r.PromptTokens, r.CachedAnswers, r.CacheHitRate)
	}
	var sb strings.Builder
	rep.WriteTable(&sb)
	if out := squeeze(sb.String()); !strings.Contains(out, "prompt tokens 28") || strings.Contains(out, "cache hit rate") {
		t.Errorf("want a prompt tokens row and no cache rows:\n%s", out)
	}
}

func TestTableShowsCacheRows(t *testing.T) {
	rep := sampleReport()
	for i, rate := range []float64{0.25, 0} { // B's engines report a cache that never hits
		for j := range rep.Targets[i].Rounds {
			r := &rep.Targets[i].Rounds[j]
			r.PromptTokens, r.CachedAnswers, r.CacheHitRate = 1000, 100, rate
			r.CachedTokens = int64(rate * 1000)
		}
		rep.Targets[i].Median = medianRound(rep.Targets[i].Rounds)
	}
	var sb strings.Builder
	rep.WriteTable(&sb)
	out := squeeze(sb.String())
	for _, row := range []string{"prompt tokens 1000 1000 1.00x", "cached tokens 250 0 0.00x", "cache hit rate 0.250 0.000 0.00x"} {
		if !strings.Contains(out, row) {
			t.Errorf("table lacks row %q:\n%s", row, out)
		}
	}
}

func BenchmarkAnswerUsage(b *testing.B) {
	ids := strings.Repeat("1234,", 127) + "1234"
	answer := []byte(`{"text":"` + strings.Repeat("word ", 128) + `","output_ids":[` + ids +
		`],"meta_info":{"id":"x","finish_reason":{"type":"length","length":128},"prompt_tokens":1280,"weight_version":"default","completion_tokens":128,"cached_tokens":1024,"e2e_latency":0.5}}`)
	b.ReportAllocs()
	for b.Loop() {
		if answerUsage(answer).cached != 1024 {
			b.Fatal("cached tokens not read")
		}
	}
}
