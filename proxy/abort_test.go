package proxy

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

func TestAbortBodies(t *testing.T) {
	cases := []struct {
		raw   string
		items int
		want  []string // nil: refused
	}{
		{`"r1"`, 0, []string{`{"rid":"r1"}`}},
		{` "r1" `, 0, []string{`{"rid":"r1"}`}},
		{`"a\"b"`, 0, []string{`{"rid":"a\"b"}`}},
		{`"r"`, 3, []string{`{"rid":"r_0"}`, `{"rid":"r_1"}`, `{"rid":"r_2"}`}},
		{`["x","y"]`, 0, []string{`{"rid":"x"}`, `{"rid":"y"}`}},
		{`[ "x" , "y\\" ]`, 5, []string{`{"rid":"x"}`, `{"rid":"y\\"}`}},
		{`[]`, 0, nil},
		{`["x",1]`, 0, nil},
		{`["x"`, 0, nil},
		{`["x",]`, 0, nil},
		{`"x`, 0, nil},
		{`"x" "y"`, 0, nil},
		{`5`, 0, nil},
		{`null`, 0, nil},
		{``, 0, nil},
	}
	for _, c := range cases {
		got := abortBodies([]byte(c.raw), c.items)
		var s []string
		for _, b := range got {
			s = append(s, string(b))
		}
		if strings.Join(s, " ") != strings.Join(c.want, " ") || (got == nil) != (c.want == nil) {
			t.Errorf("abortBodies(%s, %d) = %q, want %q", c.raw, c.items, s, c.want)
		}
	}
}

// FuzzAbortBodies checks abortBodies against encoding/json: it renders one
// {"rid": string} body per rid exactly when the input is a JSON string or
// a non-empty list of strings, with the rids as JSON reads them.
func FuzzAbortBodies(f *testing.F) {
	for _, s := range []string{`"r"`, `["a","b"]`, `"a\u0041\n"`, `[ "x" ,"y"]`, `["x",1]`, `{}`, `"\"`, `[`} {
		f.Add(s, 0)
		f.Add(s, 2)
	}
	f.Fuzz(func(t *testing.T, raw string, items int) {
		items %= 70
		got := abortBodies([]byte(raw), items)
		var one string
		var list []string
		var want []string
		switch {
		case json.Unmarshal([]byte(raw), &one) == nil && strings.TrimSpace(raw) != "null": // null decodes as ""
			if items <= 0 {
				want = []string{one}
			} else {
				for i := range items {
					want = append(want, one+"_"+strconv.Itoa(i))
				}
			}
		case json.Unmarshal([]byte(raw), &list) == nil && strings.TrimSpace(raw) != "null":
			if listOfStrings(raw) {
				want = list
			}
		}
		if len(got) != len(want) {
			t.Fatalf("abortBodies(%q, %d): %d bodies, want %d", raw, items, len(got), len(want))
		}
		for i, b := range got {
			var body struct{ Rid *string }
			if err := json.Unmarshal(b, &body); err != nil || body.Rid == nil {
				t.Fatalf("body %s: %v", b, err)
			}
			if *body.Rid != want[i] {
				t.Fatalf("rid %q, want %q", *body.Rid, want[i])
			}
		}
	})
}

// listOfStrings: raw is a JSON list whose items are all strings (json
// decodes null items into "" as well).
func listOfStrings(raw string) bool {
	var items []json.RawMessage
	if json.Unmarshal([]byte(raw), &items) != nil {
		return false
	}
	for _, it := range items {
		if len(it) == 0 || it[0] != '"' {
			return false
		}
	}
	return true
}
