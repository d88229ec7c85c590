package mock

import (
	"strings"
	"testing"
)

func TestChatCompletionPlain(t *testing.T) {
	_, url := startEngine(t, Options{Model: "m1"})
	status, b := post(t, url+"/v1/chat/completions",
		`{"messages":[{"role":"user","content":"one two"},{"role":"user","content":[{"type":"text","text":"three"}]}],"max_tokens":3,"n":2,"bootstrap_room":4}`)
	if status != 200 {
		t.Fatalf("status %d: %s", status, b)
	}
	v := decode(t, b)
	if path(v, "object") != "chat.completion" || path(v, "model") != "m1" {
		t.Errorf("object/model: %s", b)
	}
	for i := 0; i < 2; i++ {
		c := path(v, "choices", i)
		if path(c, "index") != float64(i) || path(c, "message", "role") != "assistant" ||
			path(c, "message", "content") != "the quick brown" || path(c, "finish_reason") != "length" {
			t.Errorf("choice %d: %v", i, c)
		}
	}
	// "user: one two" "user: three" is 5 words, counted once for the 2 choices.
	if path(v, "usage", "prompt_tokens") != 5.0 || path(v, "usage", "completion_tokens") != 6.0 || path(v, "usage", "total_tokens") != 11.0 {
		t.Errorf("usage %v", path(v, "usage"))
	}
}

func TestCompletionPlain(t *testing.T) {
	_, url := startEngine(t, Options{})
	_, b := post(t, url+"/v1/completions", `{"model":"x","prompt":["a","b"],"max_tokens":1,"bootstrap_room":4}`)
	v := decode(t, b)
	if path(v, "object") != "text_completion" || path(v, "model") != "x" ||
		path(v, "choices", 1, "text") != "the" || path(v, "choices", 2) != nil {
		t.Errorf("completion: %s", b)
	}
}

func TestOpenAIWithoutRoomIs400(t *testing.T) {
	_, url := startEngine(t, Options{})
	for _, route := range []string{"/v1/chat/completions", "/v1/completions"} {
		status, b := post(t, url+route, `{"messages":[],"prompt":"a","rid":"q"}`)
		v := decode(t, b)
		if status != 400 || path(v, "object") != "error" || path(v, "code") != 400.0 ||
			path(v, "message") != "Invalid request: Disaggregated request received without bootstrap room id. req.rid='q'" {
			t.Errorf("%s: status %d body %s", route, status, b)
		}
	}
}

func TestChatStream(t *testing.T) {
	_, url := startEngine(t, Options{TokenDelay: -1})
	status, b, _ := do(t, "POST", url+"/v1/chat/completions",
		`{"messages":[{"role":"user","content":"hi"}],"max_tokens":3,"stream":true,"stream_options":{"include_usage":true},"bootstrap_room":1}`)
	evs := events(t, b)
	// role, 3 tokens, finish, usage, [DONE]
	if status != 200 || len(evs) != 7 || evs[6] != "[DONE]" {
		t.Fatalf("status %d events %q", status, evs)
	}
	if path(decode(t, []byte(evs[0])), "choices", 0, "delta", "role") != "assistant" {
		t.Errorf("first chunk has no role: %s", evs[0])
	}
	var text strings.Builder
	for _, ev := range evs[:5] {
		v := decode(t, []byte(ev))
		if path(v, "object") != "chat.completion.chunk" {
			t.Errorf("object: %s", ev)
		}
		s, _ := path(v, "choices", 0, "delta", "content").(string)
		text.WriteString(s)
	}
	if text.String() != "the quick brown" {
		t.Errorf("streamed content %q", text.String())
	}
	if path(decode(t, []byte(evs[4])), "choices", 0, "finish_reason") != "length" {
		t.Errorf("finish chunk: %s", evs[4])
	}
	if path(decode(t, []byte(evs[5])), "usage", "completion_tokens") != 3.0 {
		t.Errorf("usage chunk: %s", evs[5])
	}
}

func TestCompletionStream(t *testing.T) {
	_, url := startEngine(t, Options{TokenDelay: -1})
	_, b, _ := do(t, "POST", url+"/v1/completions", `{"prompt":"hi","max_tokens":2,"stream":true,"bootstrap_room":1}`)
	evs := events(t, b)
	if len(evs) != 3 || evs[2] != "[DONE]" {
		t.Fatalf("events %q", evs)
	}
	last := decode(t, []byte(evs[1]))
	if path(last, "choices", 0, "text") != " quick" || path(last, "choices", 0, "finish_reason") != "length" {
		t.Errorf("last chunk %s", evs[1])
	}
}
