package mock

import (
	"testing"

	"github.com/valyala/fasthttp"
)

// BenchmarkFastGenerate measures the engine's own cost for a plain /generate
// in Fast mode (handler only, no network): it must stay far below pdlb's.
//
//	go test -run '^$' -bench FastGenerate -benchmem ./bench/mock/
func BenchmarkFastGenerate(b *testing.B) {
	e := New(Options{Fast: true}, nopLog())
	body := []byte(`{"text":"The capital of France is","sampling_params":{"max_new_tokens":16},"bootstrap_host":"10.0.0.1","bootstrap_port":8998,"bootstrap_room":9223372036854775807}`)
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod("POST")
	ctx.Request.SetRequestURI("/generate")
	ctx.Request.SetBody(body)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ctx.Response.Reset()
		e.Handler(&ctx)
		if ctx.Response.StatusCode() != 200 {
			b.Fatalf("status %d", ctx.Response.StatusCode())
		}
	}
}

// BenchmarkGenerate is the full (parsed) path, for comparison.
func BenchmarkGenerate(b *testing.B) {
	e := New(Options{TokenDelay: -1}, nopLog())
	body := []byte(`{"text":"The capital of France is","sampling_params":{"max_new_tokens":16},"bootstrap_host":"10.0.0.1","bootstrap_port":8998,"bootstrap_room":9223372036854775807}`)
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod("POST")
	ctx.Request.SetRequestURI("/generate")
	ctx.Request.SetBody(body)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		ctx.Response.Reset()
		e.Handler(&ctx)
	}
}

func TestFastAnswerShape(t *testing.T) {
	_, url := startEngine(t, Options{Fast: true, OutputLen: 3})
	status, b := post(t, url+"/generate", `{"text":"a","bootstrap_room":1}`)
	v := decode(t, b)
	if status != 200 || path(v, "text") != "the quick brown" || path(v, "meta_info", "completion_tokens") != 3.0 {
		t.Errorf("fast answer %d %s", status, b)
	}
	if status, _ := post(t, url+"/generate", `{"text":"a"}`); status != 400 {
		t.Errorf("fast mode without room: %d, want 400", status)
	}
	status, b = post(t, url+"/v1/chat/completions", `{"messages":[],"bootstrap_room":1}`)
	if status != 200 || path(decode(t, b), "choices", 0, "message", "content") != "the quick brown" {
		t.Errorf("fast chat %d %s", status, b)
	}
	_, b, _ = do(t, "POST", url+"/generate", `{"text":"a","bootstrap_room":1,"stream":true}`)
	if evs := events(t, b); len(evs) != 4 {
		t.Errorf("fast stream events %q", evs)
	}
}
