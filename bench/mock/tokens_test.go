package mock

import (
	"reflect"
	"testing"

	"github.com/tidwall/gjson"
)

func TestTokenizeSplitsOnASCIIWhitespace(t *testing.T) {
	a := tokenize(nil, "  alpha\tbeta\ngamma\r\n\v\fdelta ")
	if len(a) != 4 {
		t.Fatalf("%d tokens, want 4: %v", len(a), a)
	}
	b := tokenize(nil, "alpha beta gamma delta epsilon")
	if !reflect.DeepEqual(a, b[:4]) {
		t.Errorf("a shared word prefix is not a shared token prefix: %v vs %v", a, b)
	}
	// Non-ASCII spaces are part of words, like any other byte.
	if got := tokenize(nil, "a\u00a0b"); len(got) != 1 {
		t.Errorf("NBSP split a word: %v", got)
	}
	for _, id := range b {
		if id < 2000 || id >= 32000 {
			t.Errorf("id %d outside the prompt vocabulary [2000, 32000)", id)
		}
	}
	if got := tokenize(nil, " \t "); len(got) != 0 {
		t.Errorf("blank text gave %v", got)
	}
}

func TestChatTokensRenderRoleAndContent(t *testing.T) {
	msgs := gjson.Parse(`[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi there"}]}]`)
	want := tokenize(nil, "system: be brief user: hi there")
	if got := chatTokens(msgs); !reflect.DeepEqual(got, want) {
		t.Errorf("chat tokens %v, want those of %q: %v", got, "system: be brief user: hi there", want)
	}
}
