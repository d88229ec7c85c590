package mock

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"
)

// lastGenerated streams a /generate body and returns the last event's
// output_ids and text.
func lastGenerated(t *testing.T, url, body string) ([]any, string) {
	t.Helper()
	status, b, _ := do(t, "POST", url+"/generate", body)
	evs := events(t, b)
	if status != 200 || len(evs) < 2 || evs[len(evs)-1] != "[DONE]" {
		t.Fatalf("status %d events %q", status, evs)
	}
	v := decode(t, []byte(evs[len(evs)-2]))
	ids, _ := path(v, "output_ids").([]any)
	text, _ := path(v, "text").(string)
	return ids, text
}

func idList(ids []any) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprint(int64(id.(float64)))
	}
	return strings.Join(s, ",")
}

// A request re-issued with its prompt plus the first k generated tokens, as
// ids or as text, continues with exactly the tokens the whole run produced.
func TestChainedOutputContinues(t *testing.T) {
	_, url := startEngine(t, Options{ChainedOutput: true})
	const n = 12
	fullIDs, fullText := lastGenerated(t, url, fmt.Sprintf(`{"input_ids":[5,6,7],"bootstrap_room":1,"stream":true,"sampling_params":{"max_new_tokens":%d}}`, n))
	if len(fullIDs) != n {
		t.Fatalf("%d ids", len(fullIDs))
	}
	distinct := map[float64]bool{}
	for _, id := range fullIDs {
		distinct[id.(float64)] = true
	}
	if len(distinct) < n/2 {
		t.Errorf("ids %v hardly vary", fullIDs)
	}
	for _, k := range []int{1, 5, n - 1} {
		ids, text := lastGenerated(t, url, fmt.Sprintf(`{"input_ids":[5,6,7,%s],"bootstrap_room":1,"stream":true,"sampling_params":{"max_new_tokens":%d}}`, idList(fullIDs[:k]), n-k))
		if got := append(append([]any{}, fullIDs[:k]...), ids...); !reflect.DeepEqual(got, fullIDs) {
			t.Errorf("k=%d: ids continue as %v, want %v", k, got, fullIDs)
		}
		words := strings.Fields(fullText)
		if want := " " + strings.Join(words[k:], " "); text != want {
			t.Errorf("k=%d: text %q, want %q", k, text, want)
		}
	}
	// Text prompts: prompt text + generated text continues the same way.
	_, whole := lastGenerated(t, url, fmt.Sprintf(`{"text":"hello there","bootstrap_room":1,"stream":true,"sampling_params":{"max_new_tokens":%d}}`, n))
	for _, k := range []int{1, 7} {
		words := strings.Fields(whole)
		prompt := "hello there " + strings.Join(words[:k], " ")
		_, text := lastGenerated(t, url, fmt.Sprintf(`{"text":%q,"bootstrap_room":1,"stream":true,"sampling_params":{"max_new_tokens":%d}}`, prompt, n-k))
		if want := " " + strings.Join(words[k:], " "); text != want {
			t.Errorf("text k=%d: %q, want %q", k, text, want)
		}
	}
	// Another prompt, another answer.
	other, _ := lastGenerated(t, url, fmt.Sprintf(`{"input_ids":[5,6,8],"bootstrap_room":1,"stream":true,"sampling_params":{"max_new_tokens":%d}}`, n))
	if reflect.DeepEqual(other, fullIDs) {
		t.Errorf("prompts [5,6,7] and [5,6,8] answer alike: %v", other)
	}
}

func TestDieAfterEvents(t *testing.T) {
	e, url := startEngine(t, Options{DieAfterEvents: 2, DieStreams: 1, TokenDelay: time.Millisecond, OutputLen: 6})
	body := `{"text":"a","bootstrap_room":1,"stream":true}`
	resp, err := client(t, 5*time.Second).Post(url+"/generate", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("read error %v, want unexpected EOF", err)
	}
	if got := strings.Count(string(b), "data: "); got != 2 || strings.Contains(string(b), "[DONE]") {
		t.Errorf("got %d events before dying, want 2 and no [DONE]: %q", got, b)
	}
	// DieStreams: 1 — the second stream lives.
	_, b2, _ := do(t, "POST", url+"/generate", body)
	if evs := events(t, b2); len(evs) != 7 || evs[6] != "[DONE]" {
		t.Errorf("second stream: %q", evs)
	}
	if e.Stats().Deaths != 1 {
		t.Errorf("Deaths %d", e.Stats().Deaths)
	}
}
