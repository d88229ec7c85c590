package mock

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"
)

func TestGenerateWithoutRoomIs400(t *testing.T) {
	for _, role := range []string{RolePrefill, RoleDecode} {
		t.Run(role, func(t *testing.T) {
			_, url := startEngine(t, Options{Role: role})
			for _, body := range []string{
				`{"text":"hi","rid":"abc"}`,
				`{"text":"hi","rid":"abc","bootstrap_room":null}`,
			} {
				status, b := post(t, url+"/generate", body)
				if status != 400 {
					t.Fatalf("%s: status %d, want 400", body, status)
				}
				v := decode(t, b)
				want := "Invalid request: Disaggregated request received without bootstrap room id. req.rid='abc'"
				if got := path(v, "error", "message"); got != want {
					t.Errorf("message %q, want %q", got, want)
				}
				if path(v, "error", "type") != "invalid_request_error" || path(v, "error", "code") != 400.0 {
					t.Errorf("error shape: %s", b)
				}
			}
		})
	}
}

func TestGenerateGeneratesAnIDForTheMessage(t *testing.T) {
	_, url := startEngine(t, Options{})
	_, b := post(t, url+"/generate", `{"text":"hi"}`)
	msg, _ := path(decode(t, b), "error", "message").(string)
	if !strings.HasSuffix(msg, "'") || strings.Contains(msg, "req.rid=''") {
		t.Errorf("message without a made-up rid: %q", msg)
	}
}

func TestGeneratePlainShape(t *testing.T) {
	_, url := startEngine(t, Options{})
	status, b := post(t, url+"/generate",
		`{"text":"hello big world","rid":"r1","bootstrap_room":42,"sampling_params":{"max_new_tokens":4}}`)
	if status != 200 {
		t.Fatalf("status %d: %s", status, b)
	}
	v := decode(t, b)
	if got := path(v, "text"); got != "the quick brown fox" {
		t.Errorf("text %q", got)
	}
	if got := path(v, "output_ids"); !reflect.DeepEqual(got, []any{1000.0, 1001.0, 1002.0, 1003.0}) {
		t.Errorf("output_ids %v", got)
	}
	meta := path(v, "meta_info")
	checks := map[string]any{"id": "r1", "prompt_tokens": 3.0, "completion_tokens": 4.0, "cached_tokens": 0.0}
	for k, want := range checks {
		if got := path(meta, k); got != want {
			t.Errorf("meta_info.%s = %v, want %v", k, got, want)
		}
	}
	if got := path(meta, "finish_reason"); !reflect.DeepEqual(got, map[string]any{"type": "length", "length": 4.0}) {
		t.Errorf("finish_reason %v", got)
	}
	if _, ok := path(meta, "e2e_latency").(float64); !ok {
		t.Errorf("e2e_latency missing: %s", b)
	}
	if path(meta, "input_token_logprobs") != nil || path(meta, "output_token_logprobs") != nil {
		t.Errorf("logprobs without return_logprob: %s", b)
	}
}

func TestGenerateDefaultOutputLenAndPrefillOneToken(t *testing.T) {
	_, decodeURL := startEngine(t, Options{Role: RoleDecode, OutputLen: 7})
	_, prefillURL := startEngine(t, Options{Role: RolePrefill, OutputLen: 7})
	_, b := post(t, decodeURL+"/generate", `{"text":"x","bootstrap_room":1}`)
	if got := path(decode(t, b), "meta_info", "completion_tokens"); got != 7.0 {
		t.Errorf("decode completion_tokens %v, want 7", got)
	}
	_, b = post(t, prefillURL+"/generate", `{"text":"x","bootstrap_room":1,"sampling_params":{"max_new_tokens":50}}`)
	if got := path(decode(t, b), "meta_info", "completion_tokens"); got != 1.0 {
		t.Errorf("prefill completion_tokens %v, want 1", got)
	}
}

func TestGenerateLogprobsTellPrefillFromDecode(t *testing.T) {
	_, prefillURL := startEngine(t, Options{Role: RolePrefill})
	_, decodeURL := startEngine(t, Options{Role: RoleDecode})
	body := `{"input_ids":[11,12,13],"bootstrap_room":5,"return_logprob":true,"sampling_params":{"max_new_tokens":3}}`

	_, b := post(t, prefillURL+"/generate", body)
	meta := path(decode(t, b), "meta_info")
	wantIn := []any{
		[]any{PrefillInputLogprob, 11.0, nil},
		[]any{PrefillInputLogprob, 12.0, nil},
		[]any{PrefillInputLogprob, 13.0, nil},
	}
	if got := path(meta, "input_token_logprobs"); !reflect.DeepEqual(got, wantIn) {
		t.Errorf("prefill input_token_logprobs %v, want %v", got, wantIn)
	}
	if got := path(meta, "output_token_logprobs"); !reflect.DeepEqual(got, []any{[]any{OutputLogprob, 1000.0, nil}}) {
		t.Errorf("prefill output_token_logprobs %v", got)
	}

	_, b = post(t, decodeURL+"/generate", body)
	meta = path(decode(t, b), "meta_info")
	if got := path(meta, "input_token_logprobs"); !reflect.DeepEqual(got, []any{[]any{DecodeInputLogprob, 1000.0, nil}}) {
		t.Errorf("decode input_token_logprobs %v", got)
	}
	out, _ := path(meta, "output_token_logprobs").([]any)
	if len(out) != 3 || !reflect.DeepEqual(out[2], []any{OutputLogprob, 1002.0, nil}) {
		t.Errorf("decode output_token_logprobs %v", out)
	}
}

func TestGenerateBatch(t *testing.T) {
	_, url := startEngine(t, Options{OutputLen: 2})
	for name, tc := range map[string]struct {
		body    string
		prompts []float64
	}{
		"text":      {`{"text":["a","b c","d e f"],"rid":"b","bootstrap_room":[1,2,3]}`, []float64{1, 2, 3}},
		"input_ids": {`{"input_ids":[[1,2],[3]],"rid":"b","bootstrap_room":9}`, []float64{2, 1}},
	} {
		t.Run(name, func(t *testing.T) {
			status, b := post(t, url+"/generate", tc.body)
			if status != 200 {
				t.Fatalf("status %d: %s", status, b)
			}
			items, ok := decode(t, b).([]any)
			if !ok || len(items) != len(tc.prompts) {
				t.Fatalf("want a %d-item array: %s", len(tc.prompts), b)
			}
			for i, it := range items {
				if got := path(it, "meta_info", "prompt_tokens"); got != tc.prompts[i] {
					t.Errorf("item %d prompt_tokens %v, want %v", i, got, tc.prompts[i])
				}
				if got := path(it, "text"); got != "the quick" {
					t.Errorf("item %d text %q", i, got)
				}
			}
		})
	}
}

func TestHookSeesNormalisedBootstrapFields(t *testing.T) {
	var mu sync.Mutex
	var seen []*Request
	_, url := startEngine(t, Options{BeforeAnswer: func(_ context.Context, r *Request) error {
		mu.Lock()
		seen = append(seen, r)
		mu.Unlock()
		return nil
	}})
	post(t, url+"/generate", `{"text":["a","b","c"],"bootstrap_room":9223372036854775805,"bootstrap_host":"10.0.0.1","bootstrap_port":null}`)
	post(t, url+"/generate", `{"text":"a","bootstrap_room":[9223372036854775807],"bootstrap_host":["[::1]"],"bootstrap_port":[8998]}`)
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 {
		t.Fatalf("hook ran %d times, want 2", len(seen))
	}
	if got := seen[0].BootstrapRooms; !reflect.DeepEqual(got, []uint64{9223372036854775805, 9223372036854775806, 9223372036854775807}) {
		t.Errorf("scalar room not expanded room+i exactly: %v", got)
	}
	if got := seen[0].BootstrapHosts; !reflect.DeepEqual(got, []string{"10.0.0.1", "10.0.0.1", "10.0.0.1"}) {
		t.Errorf("hosts %v", got)
	}
	if got := seen[0].BootstrapPorts; !reflect.DeepEqual(got, []int{0, 0, 0}) {
		t.Errorf("null port: %v", got)
	}
	if got := seen[1]; !reflect.DeepEqual(got.BootstrapRooms, []uint64{9223372036854775807}) ||
		!reflect.DeepEqual(got.BootstrapPorts, []int{8998}) || got.BootstrapHosts[0] != "[::1]" || got.Batch {
		t.Errorf("list fields: %+v", got)
	}
}

func TestHookErrorIsAnswered(t *testing.T) {
	_, url := startEngine(t, Options{BeforeAnswer: func(context.Context, *Request) error {
		return &StatusError{Code: 500, Message: "Decode handshake failed for request"}
	}})
	status, b := post(t, url+"/generate", `{"text":"a","bootstrap_room":1}`)
	if status != 500 || path(decode(t, b), "error", "message") != "Decode handshake failed for request" {
		t.Errorf("status %d body %s", status, b)
	}
}

func TestBadRequests(t *testing.T) {
	_, url := startEngine(t, Options{})
	status, b := post(t, url+"/generate", `{"text":`)
	if status != 400 || !json.Valid(b) {
		t.Errorf("bad JSON: status %d body %s", status, b)
	}
	status, _ = post(t, url+"/generate", `[1,2]`)
	if status != 400 {
		t.Errorf("non-object: status %d", status)
	}
	status, _, _ = do(t, "GET", url+"/generate", "")
	if status != 405 {
		t.Errorf("GET /generate: status %d, want 405", status)
	}
	status, b, _ = do(t, "GET", url+"/nope", "")
	if status != 404 || string(b) != `{"detail":"Not Found"}` {
		t.Errorf("unknown path: status %d body %s", status, b)
	}
}

// TestStreamReadLikePydantic: the mock reads "stream" as SGLang's request
// models do, so that a body pdlb reads as a stream ("yes", 1) is one for
// the mock too.
func TestStreamReadLikePydantic(t *testing.T) {
	for body, want := range map[string]bool{
		`{"text":"a","stream":true}`: true, `{"text":"a","stream":"yes"}`: true, `{"text":"a","stream":"On"}`: true,
		`{"text":"a","stream":1}`: true, `{"text":"a","stream":1.0}`: true, `{"text":"a","stream":false}`: false,
		`{"text":"a","stream":"no"}`: false, `{"text":"a","stream":0}`: false, `{"text":"a"}`: false,
		`{"text":"a","stream":false,"stream":true}`: true, `{"text":"a","stream":true,"stream":false}`: false,
	} {
		e := New(Options{Role: RoleDecode}, zerolog.Nop())
		r, err := e.parseGenerate([]byte(body))
		if err != nil || r.Stream != want {
			t.Errorf("%s: stream=%v (%v), want %v", body, r.Stream, err, want)
		}
	}
}
