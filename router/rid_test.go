package router

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestOwnRID(t *testing.T) {
	cases := []struct {
		name  string
		id    string
		rooms []uint64
		batch bool
		want  string
	}{
		{"single", "req-1", []uint64{42}, false, `"req-1-0000000000000000042"`},
		{"largest room", "r", []uint64{maxRoom}, false, `"r-9223372036854775807"`},
		{"batch", "req-1", []uint64{7, 8}, true, `["req-1-0000000000000000007","req-1-0000000000000000008"]`},
		{"id escaped", `a"b\c`, []uint64{1}, false, `"a\"b\\c-0000000000000000001"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := appendOwnRID(nil, c.id, c.rooms, c.batch)
			if string(got) != c.want {
				t.Fatalf("got %s, want %s", got, c.want)
			}
			if !json.Valid(got) {
				t.Fatalf("not JSON: %s", got)
			}
			if len(got) > ownRIDCap(c.id, len(c.rooms)) {
				t.Fatalf("%d bytes, over ownRIDCap %d", len(got), ownRIDCap(c.id, len(c.rooms)))
			}
		})
	}
}

// pdlb's rids are never prefixes of one another, whatever the rooms:
// SGLang's scheduler aborts every rid that starts with the one named.
func TestOwnRIDsArePrefixFree(t *testing.T) {
	rooms := []uint64{0, 1, 10, 12, 123, 1234567890, maxRoom}
	var rids []string
	for _, room := range rooms {
		var s string
		json.Unmarshal(appendOwnRID(nil, "req-1", []uint64{room}, false), &s)
		rids = append(rids, s)
	}
	for i, a := range rids {
		for j, b := range rids {
			if i != j && strings.HasPrefix(b, a) {
				t.Errorf("%q is a prefix of %q", a, b)
			}
		}
	}
}

func TestInjectionWritesRID(t *testing.T) {
	port := 8998
	base := `"bootstrap_host":"h","bootstrap_port":8998,"bootstrap_room":42`
	cases := []struct {
		name, body, rid, want string
	}{
		{"added", `{"text":"hi"}`, `"req-1-0000000000000000042"`,
			`{"text":"hi",` + base + `,"rid":"req-1-0000000000000000042"}`},
		{"client null replaced", `{"rid":null,"text":"hi"}`, `"x"`,
			`{"text":"hi",` + base + `,"rid":"x"}`},
		{"every client null replaced", `{"rid":"a","text":"hi","rid":null}`, `"x"`,
			`{"text":"hi",` + base + `,"rid":"x"}`},
		{"none: body as it was", `{"rid":"mine","text":"hi"}`, "",
			`{"rid":"mine","text":"hi",` + base + `}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := injection{host: "h", port: &port}
			if c.rid != "" {
				in.rid = []byte(c.rid)
			}
			if got := inject(t, c.body, in); got != c.want {
				t.Fatalf("\n got %s\nwant %s", got, c.want)
			}
		})
	}
}

func TestParseRID(t *testing.T) {
	ok := []struct {
		name, body, route, want string
	}{
		{"absent", `{"text":"a"}`, "/generate", ""},
		{"null", `{"text":"a","rid":null}`, "/generate", ""},
		{"string", `{"text":"a","rid":"r1"}`, "/generate", `"r1"`},
		{"last wins", `{"rid":"r1","text":"a","rid":"r2"}`, "/generate", `"r2"`},
		{"last null wins", `{"rid":"r1","text":"a","rid":null}`, "/generate", ""},
		{"batch list", `{"text":["a","b"],"rid":["r1","r2"]}`, "/generate", `["r1","r2"]`},
		{"batch string", `{"text":["a","b"],"rid":"r"}`, "/generate", `"r"`},
		{"chat", `{"messages":[],"rid":"c1"}`, "/v1/chat/completions", `"c1"`},
		{"chat list (n > 1)", `{"messages":[],"n":2,"rid":["c1"]}`, "/v1/chat/completions", `["c1"]`},
	}
	for _, c := range ok {
		t.Run(c.name, func(t *testing.T) {
			opt := openAIRoute
			if c.route == "/generate" {
				opt = generateRoute
			}
			r, err := parseRequest([]byte(c.body), opt)
			if err != nil {
				t.Fatal(err)
			}
			if got := c.body[r.rid.start:r.rid.end]; got != c.want {
				t.Fatalf("rid %q, want %q", got, c.want)
			}
		})
	}
	bad := []struct{ name, body, want string }{
		{"number", `{"text":"a","rid":5}`, "rid: must be a string or a list of strings, got 5"},
		{"object", `{"text":"a","rid":{}}`, "rid: must be a string or a list"},
		{"list of numbers", `{"text":["a","b"],"rid":["r",1]}`, "rid: item 1 must be a string, got 1"},
		{"list too short for the batch", `{"text":["a","b"],"rid":["r"]}`, "rid: a list of 1 rids for a batch of 2 items"},
		{"repeated too often", `{"text":"a"` + strings.Repeat(`,"rid":null`, maxDrops+1) + `}`, "rid: repeated too often"},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			_, err := parseRequest([]byte(c.body), generateRoute)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want %q", err, c.want)
			}
		})
	}
}

// FuzzRID holds pdlb's reading of rid to encoding/json's (the last rid
// member is the one the engine reads, as SGLang's json does): null or
// absent is none, a string is kept, a list of strings is kept when its
// length fits the batch, anything else is a 400 naming rid. When pdlb
// writes its own rid the engine reads that one, and only it.
func FuzzRID(f *testing.F) {
	for _, s := range []string{`{"text":"a","rid":"r"}`, `{"text":["a","b"],"rid":["x","y"]}`, `{"text":"a","rid":null}`,
		`{"text":"a","rid":5}`, `{"rid":"a","text":["a","b"],"r\u0069d":null}`, `{"text":["a"],"rid":["x",null]}`,
		`{"text":"a","rid":[]}`, `{"text":"a","rid":{"a":1}}`, `{"text":["a","b"],"rid":"s"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		if !json.Valid([]byte(body)) || !strings.HasPrefix(strings.TrimSpace(body), "{") {
			return // FuzzInjection's
		}
		r, err := parseRequest([]byte(body), generateRoute)
		ridErr := err != nil && strings.HasPrefix(err.Error(), "rid")
		if err != nil && !ridErr || ridErr && strings.Contains(err.Error(), "repeated too often") {
			return
		}
		last := ""
		for _, m := range members(t, []byte(body)) {
			if m.key == "rid" {
				last = m.raw
			}
		}
		var s string
		var list []json.RawMessage
		wantOK := last == "" || last == "null" || json.Unmarshal([]byte(last), &s) == nil
		if !wantOK && json.Unmarshal([]byte(last), &list) == nil {
			wantOK = r.batch == 0 || len(list) == r.batch
			for _, it := range list {
				wantOK = wantOK && len(it) > 0 && it[0] == '"'
			}
		}
		if wantOK == ridErr {
			t.Fatalf("%q: rid %s: pdlb says %v", body, last, err)
		}
		if err != nil {
			return
		}
		if got := body[r.rid.start:r.rid.end]; last != "null" && got != last {
			t.Fatalf("%q: pdlb read rid %q, the engine %q", body, got, last)
		}
		if r.rid.end > r.rid.start {
			return // the client's is kept as it is
		}
		rooms := []uint64{7}
		if r.batch > 0 {
			rooms = make([]uint64, r.batch)
		}
		own := appendOwnRID(nil, "req-1", rooms, r.batch > 0)
		port := 1
		in := injection{host: "h", port: &port, rooms: rooms, batch: r.batch > 0, rid: own}
		out := appendInjected(nil, []byte(body), &r, &in)
		var rids []string
		for _, m := range members(t, out) {
			if m.key == "rid" {
				rids = append(rids, m.raw)
			}
		}
		if len(rids) != 1 || rids[0] != string(own) {
			t.Fatalf("%q injected as %q: rid members %q, want %s alone", body, out, rids, own)
		}
	})
}
