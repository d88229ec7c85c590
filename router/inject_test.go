package router

import (
	"encoding/json"
	"strings"
	"testing"
)

func inject(t *testing.T, body string, in injection) string {
	t.Helper()
	r, err := parseRequest([]byte(body))
	if err != nil {
		t.Fatalf("parse %s: %v", body, err)
	}
	if r.batch > 0 {
		in.batch = true
		in.rooms = make([]uint64, r.batch)
		for i := range in.rooms {
			in.rooms[i] = uint64(100 + i)
		}
	} else if in.rooms == nil {
		in.rooms = []uint64{42}
	}
	out := string(appendInjected(nil, []byte(body), &r, &in))
	if !json.Valid([]byte(out)) {
		t.Fatalf("not JSON: %s", out)
	}
	return out
}

func TestInjection(t *testing.T) {
	port := 8998
	cases := []struct {
		name, body string
		in         injection
		want       string
	}{
		{"single", `{"text":"hi"}`, injection{host: "10.0.0.1", port: &port},
			`{"text":"hi","bootstrap_host":"10.0.0.1","bootstrap_port":8998,"bootstrap_room":42}`},
		{"null port", `{"text":"hi"}`, injection{host: "p"},
			`{"text":"hi","bootstrap_host":"p","bootstrap_port":null,"bootstrap_room":42}`},
		{"ipv6", `{"text":"hi"}`, injection{host: "[::1]", port: &port},
			`{"text":"hi","bootstrap_host":"[::1]","bootstrap_port":8998,"bootstrap_room":42}`},
		{"batch text", `{"text":["a","b"]}`, injection{host: "h", port: &port},
			`{"text":["a","b"],"bootstrap_host":["h","h"],"bootstrap_port":[8998,8998],"bootstrap_room":[100,101]}`},
		{"batch input_ids", `{"input_ids":[[1,2],[3],[4]]}`, injection{host: "h"},
			`{"input_ids":[[1,2],[3],[4]],"bootstrap_host":["h","h","h"],"bootstrap_port":[null,null,null],"bootstrap_room":[100,101,102]}`},
		{"single input_ids", `{"input_ids":[1,2,3]}`, injection{host: "h", port: &port},
			`{"input_ids":[1,2,3],"bootstrap_host":"h","bootstrap_port":8998,"bootstrap_room":42}`},
		{"client keys replaced", `{"bootstrap_room":7,"text":"x","bootstrap_host":"evil","bootstrap_port":1}`, injection{host: "h", port: &port},
			`{"text":"x","bootstrap_host":"h","bootstrap_port":8998,"bootstrap_room":42}`},
		{"only client keys", `{"bootstrap_room":7}`, injection{host: "h", port: &port},
			`{"bootstrap_host":"h","bootstrap_port":8998,"bootstrap_room":42}`},
		{"empty object", `{}`, injection{host: "h", port: &port},
			`{"bootstrap_host":"h","bootstrap_port":8998,"bootstrap_room":42}`},
		{"whitespace kept", "{ \"text\" : \"hi\" ,\n \"n\":1 }\n", injection{host: "h", port: &port},
			"{ \"text\" : \"hi\" ,\n \"n\":1,\"bootstrap_host\":\"h\",\"bootstrap_port\":8998,\"bootstrap_room\":42}\n"},
		{"big integers exact", `{"sampling_params":{"seed":18446744073709551615},"x":-9223372036854775808,"f":1e400}`, injection{host: "h", port: &port},
			`{"sampling_params":{"seed":18446744073709551615},"x":-9223372036854775808,"f":1e400,"bootstrap_host":"h","bootstrap_port":8998,"bootstrap_room":42}`},
		{"nested bootstrap keys untouched", `{"meta":{"bootstrap_room":1}}`, injection{host: "h", port: &port},
			`{"meta":{"bootstrap_room":1},"bootstrap_host":"h","bootstrap_port":8998,"bootstrap_room":42}`},
		{"rank rewritten for prefill", `{"text":"x","disagg_prefill_dp_rank":1,"routed_dp_rank":1}`, injection{host: "h", port: &port, rankKey: "routed_dp_rank", rank: 1},
			`{"text":"x","bootstrap_host":"h","bootstrap_port":8998,"bootstrap_room":42,"routed_dp_rank":1}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := inject(t, c.body, c.in); got != c.want {
				t.Fatalf("\n got %s\nwant %s", got, c.want)
			}
		})
	}
}

func TestParseRequest(t *testing.T) {
	r, err := parseRequest([]byte(`{"stream":true,"return_logprob":1,"text":["a","b","c"],"disagg_prefill_dp_rank":1,"routed_dp_rank":0}`))
	if err != nil || !r.stream || !r.returnLogprob || r.batch != 3 || r.prefillRank != 1 || r.rankField != "disagg_prefill_dp_rank" {
		t.Fatalf("%+v %v", r, err)
	}
	r, _ = parseRequest([]byte(`{"stream":false,"input_ids":[1,2]}`))
	if r.stream || r.batch != 0 {
		t.Fatalf("%+v", r)
	}
	for _, bad := range []string{``, `nul`, `[]`, `1`, `{"a":}`, `{"input_ids":[]}`, `{"routed_dp_rank":1.5}`, `{"routed_dp_rank":"1"}`} {
		if _, err := parseRequest([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestNewRoomFollowsRank(t *testing.T) {
	for i := 0; i < 1000; i++ {
		r := newRoom(4, 3)
		if r%4 != 3 || r > maxRoom {
			t.Fatalf("room %d", r)
		}
		if r := newRoom(0, 0); r > maxRoom {
			t.Fatalf("room %d", r)
		}
	}
}

// FuzzInjection: whatever the client sends, an accepted body comes out as
// valid JSON with the client's other members intact and pdlb's keys once.
func FuzzInjection(f *testing.F) {
	for _, s := range []string{`{"text":"hi"}`, `{"text":["a","b"]}`, `{"input_ids":[[1],[2]]}`, `{"bootstrap_room":1,"a":[1,{"b":"}"}]}`,
		"{ \"x\" : 1 , \"bootstrap_host\" : \"h\" }", `{}`, `{"routed_dp_rank":1}`, `{"a":"\u0062ootstrap_room"}`} {
		f.Add(s)
	}
	port := 1
	f.Fuzz(func(t *testing.T, body string) {
		r, err := parseRequest([]byte(body))
		if err != nil {
			return
		}
		in := injection{host: "h", port: &port, rooms: []uint64{5}, batch: r.batch > 0, rankKey: "routed_dp_rank", rank: 0}
		if in.batch {
			in.rooms = make([]uint64, r.batch)
		}
		out := appendInjected(nil, []byte(body), &r, &in)
		var m map[string]json.RawMessage
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatalf("invalid JSON out of %q: %q: %v", body, out, err)
		}
		if string(m["bootstrap_host"]) == "" || !strings.Contains(string(out), `"bootstrap_room":`) {
			t.Fatalf("keys missing: %q", out)
		}
	})
}

func BenchmarkParseInject(b *testing.B) {
	body := []byte(`{"text":"The capital of France is","sampling_params":{"temperature":0,"max_new_tokens":16},"stream":false,"return_logprob":false}`)
	port := 8998
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		r, err := parseRequest(body)
		if err != nil {
			b.Fatal(err)
		}
		var one [1]uint64
		one[0] = newRoom(0, 0)
		in := injection{host: "10.0.0.1", port: &port, rooms: one[:]}
		out := appendInjected(make([]byte, 0, len(body)+160), body, &r, &in)
		if len(out) == 0 {
			b.Fatal("empty")
		}
	}
}
