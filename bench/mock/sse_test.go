package mock

import (
	"bufio"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestGenerateStreamFraming(t *testing.T) {
	_, url := startEngine(t, Options{TokenDelay: time.Millisecond})
	status, b, resp := do(t, "POST", url+"/generate",
		`{"text":"hi","rid":"s1","bootstrap_room":3,"stream":true,"return_logprob":true,"sampling_params":{"max_new_tokens":4}}`)
	if status != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d content-type %q", status, resp.Header.Get("Content-Type"))
	}
	evs := events(t, b)
	if len(evs) != 5 || evs[4] != "[DONE]" {
		t.Fatalf("want 4 events and [DONE], got %q", evs)
	}
	texts := []string{"the", "the quick", "the quick brown", "the quick brown fox"}
	for i, ev := range evs[:4] {
		v := decode(t, []byte(ev))
		if got := path(v, "text"); got != texts[i] {
			t.Errorf("event %d text %q, want cumulative %q", i, got, texts[i])
		}
		if got := path(v, "meta_info", "completion_tokens"); got != float64(i+1) {
			t.Errorf("event %d completion_tokens %v", i, got)
		}
		if got, _ := path(v, "meta_info", "output_token_logprobs").([]any); len(got) != i+1 {
			t.Errorf("event %d output_token_logprobs %v", i, got)
		}
		fr := path(v, "meta_info", "finish_reason")
		if (i < 3) != (fr == nil) {
			t.Errorf("event %d finish_reason %v", i, fr)
		}
	}
}

func TestPrefillStreamsOneEvent(t *testing.T) {
	_, url := startEngine(t, Options{Role: RolePrefill})
	_, b, _ := do(t, "POST", url+"/generate", `{"text":"a b","bootstrap_room":3,"stream":true,"return_logprob":true}`)
	evs := events(t, b)
	if len(evs) != 2 || evs[1] != "[DONE]" {
		t.Fatalf("want one event and [DONE], got %q", evs)
	}
	if got, _ := path(decode(t, []byte(evs[0])), "meta_info", "input_token_logprobs").([]any); len(got) != 2 {
		t.Errorf("prefill event input_token_logprobs %v", got)
	}
}

func TestStreamWithoutRoomIsAnErrorEvent(t *testing.T) {
	_, url := startEngine(t, Options{})
	status, b, _ := do(t, "POST", url+"/generate", `{"text":"a","rid":"x","stream":true}`)
	evs := events(t, b)
	if status != 200 || len(evs) != 2 || evs[1] != "[DONE]" {
		t.Fatalf("status %d events %q", status, evs)
	}
	v := decode(t, []byte(evs[0]))
	if !strings.HasPrefix(path(v, "error", "message").(string), "Invalid request: Disaggregated request received without bootstrap room id.") ||
		path(v, "error", "code") != 400.0 || path(v, "error", "retryable") != false {
		t.Errorf("error event %s", evs[0])
	}
}

func TestBatchStreamCarriesIndex(t *testing.T) {
	_, url := startEngine(t, Options{TokenDelay: -1, OutputLen: 2})
	_, b, _ := do(t, "POST", url+"/generate", `{"text":["a","b"],"bootstrap_room":[1,2],"stream":true}`)
	evs := events(t, b)
	if len(evs) != 5 {
		t.Fatalf("want 2 steps × 2 items + [DONE], got %q", evs)
	}
	for i, ev := range evs[:4] {
		if got := path(decode(t, []byte(ev)), "index"); got != float64(i%2) {
			t.Errorf("event %d index %v", i, got)
		}
	}
}

// openStream starts a stream and returns its reader and response.
func openStream(t *testing.T, url, body string) (*bufio.Reader, *http.Response) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	resp, err := client(t, 0).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return bufio.NewReader(resp.Body), resp
}

func TestKeepOpenAfterDone(t *testing.T) {
	for _, keep := range []bool{false, true} {
		name := map[bool]string{false: "closes", true: "keeps-open"}[keep]
		t.Run(name, func(t *testing.T) {
			e, url := startEngine(t, Options{TokenDelay: -1, OutputLen: 2, KeepOpenAfterDone: keep})
			r, resp := openStream(t, url+"/generate", `{"text":"a","bootstrap_room":1,"stream":true}`)
			for {
				ev, err := readEvent(r)
				if err != nil {
					t.Fatalf("before [DONE]: %v", err)
				}
				if ev == "[DONE]" {
					break
				}
			}
			got := make(chan error, 1)
			go func() {
				_, err := r.ReadByte()
				got <- err
			}()
			select {
			case err := <-got:
				if keep {
					t.Fatalf("body ended after [DONE] (%v); want it kept open", err)
				}
			case <-time.After(300 * time.Millisecond):
				if !keep {
					t.Fatal("body still open after [DONE]")
				}
				if e.Stats().Streams != 1 {
					t.Errorf("Streams %d while kept open, want 1", e.Stats().Streams)
				}
				resp.Body.Close()
				eventually(t, 2*time.Second, "engine to see the client leave", func() bool { return e.Stats().Streams == 0 })
			}
		})
	}
}

func TestStreamStopsWhenClientLeaves(t *testing.T) {
	e, url := startEngine(t, Options{TokenDelay: 5 * time.Millisecond, OutputLen: 10000})
	r, resp := openStream(t, url+"/generate", `{"text":"a","bootstrap_room":1,"stream":true}`)
	for i := 0; i < 3; i++ {
		if _, err := readEvent(r); err != nil {
			t.Fatal(err)
		}
	}
	resp.Body.Close()
	eventually(t, 2*time.Second, "stream to stop", func() bool {
		s := e.Stats()
		return s.Streams == 0 && s.InFlight == 0
	})
}
