package load

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func TestBodies(t *testing.T) {
	for _, tc := range []struct {
		route, prompt, max string
	}{
		{RouteGenerate, "text", "sampling_params.max_new_tokens"},
		{RouteChatCompletions, "messages.0.content", "max_tokens"},
		{RouteCompletions, "prompt", "max_tokens"},
	} {
		for _, stream := range []bool{false, true} {
			b := appendBody(nil, tc.route, 42, 10, 77, stream)
			if !gjson.ValidBytes(b) {
				t.Fatalf("%s: invalid JSON %s", tc.route, b)
			}
			if got := gjson.GetBytes(b, tc.max).Int(); got != 77 {
				t.Errorf("%s: %s = %d, want 77", tc.route, tc.max, got)
			}
			if got := gjson.GetBytes(b, "stream").Bool(); got != stream {
				t.Errorf("%s: stream = %v, want %v", tc.route, got, stream)
			}
			p := gjson.GetBytes(b, tc.prompt).String()
			if n := len(strings.Fields(p)); n != 10 || !strings.HasPrefix(p, "r42 ") {
				t.Errorf("%s: prompt %q has %d words, want 10 starting with r42", tc.route, p, n)
			}
		}
	}
}

func TestAppendRoomKeepsJSON(t *testing.T) {
	b := appendRoom(appendBody(nil, RouteGenerate, 7, 3, 2, false), 7)
	if !json.Valid(b) || !strings.HasSuffix(string(b), `,"bootstrap_room":7}`) {
		t.Fatalf("%s", b)
	}
}
