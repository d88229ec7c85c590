package router

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func inject(t *testing.T, body string, in injection) string {
	t.Helper()
	r, err := parseRequest([]byte(body), generateRoute)
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
		{"rank rewritten for prefill", `{"text":"x","disagg_prefill_dp_rank":1,"routed_dp_rank":1}`, injection{host: "h", port: &port, ranks: [2]rankMember{{keyRouted, 1}}, nranks: 1},
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
	r, err := parseRequest([]byte(`{"stream":true,"return_logprob":1,"text":["a","b","c"],"disagg_prefill_dp_rank":1,"routed_dp_rank":0}`), generateRoute)
	if err != nil || !r.stream || !r.returnLogprob || r.batch != 3 || r.prefillRank != 1 || r.rankField != "disagg_prefill_dp_rank" {
		t.Fatalf("%+v %v", r, err)
	}
	r, _ = parseRequest([]byte(`{"stream":false,"input_ids":[1,2]}`), generateRoute)
	if r.stream || r.batch != 0 {
		t.Fatalf("%+v", r)
	}
	for _, bad := range []string{``, `nul`, `[]`, `1`, `{"a":}`, `{"input_ids":[]}`, `{"routed_dp_rank":1.5}`, `{"routed_dp_rank":"1"}`} {
		if _, err := parseRequest([]byte(bad), generateRoute); err == nil {
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

// FuzzInjection is the differential between pdlb and the engine: whatever
// the client sends, parseRequest decides (stream, return_logprob, batch,
// DP rank) what an independent last-wins, lax reading of the body
// (engineRead) decides, or both refuse it; and each injected body comes out
// as valid JSON that the engine reads the same way, with the client's other
// members intact and in order and pdlb's bootstrap members once (lists as
// long as the batch).
func FuzzInjection(f *testing.F) {
	for _, s := range []string{`{"text":"hi"}`, `{"text":["a","b"]}`, `{"input_ids":[[1],[2]]}`, `{"bootstrap_room":1,"a":[1,{"b":"}"}]}`,
		"{ \"x\" : 1 , \"bootstrap_host\" : \"h\" }", `{}`, `{"routed_dp_rank":1}`, `{"a":"\u0062ootstrap_room"}`,
		`{"text":["a","b"],"text":"x"}`, `{"text":"x","text":["a","b"],"stream":"yes","stream":0}`,
		`{"input_ids":[[1],[2]],"text":null,"return_logprob":[0,"on"],"return_logprob":1.0}`,
		`{"routed_dp_rank":0,"disagg_prefill_dp_rank":1,"routed_dp_rank":"1","disagg_prefill_dp_rank":null}`,
		`{"te\u0078t":["a"],"bootstrap\u005froom":[1],"\u0073tream":"T"}`, `{"text":["a\\\"",""],"input_ids":[]}`,
		`{"text":["","","","","","","","",""]}`, `{"stream":1e-400,"x":{"stream":true},"y":["\\",{"a":[]}]}`} {
		f.Add(s, false)
		f.Add(s, true)
	}
	port := 1
	f.Fuzz(func(t *testing.T, body string, openAI bool) {
		opt := parseOptions{generate: !openAI, maxBatch: 8}
		r, err := parseRequest([]byte(body), opt)
		want, bad, werr := engineRead([]byte(body), opt)
		switch {
		case errors.Is(werr, errEngineRefusesBody):
			// The engine answers 400 whatever pdlb decided.
		case (err == nil) != (werr == nil):
			t.Fatalf("%q: pdlb: %v; engine reading: %v %v", body, err, werr, bad)
		case err != nil:
			if key, _, _ := strings.Cut(err.Error(), ":"); len(bad) > 0 && !bad[key] {
				t.Fatalf("%q: pdlb refused naming %q, the engine reading refuses %v", body, err, bad)
			}
		case decisionOf(&r) != want:
			t.Fatalf("%q:\n  pdlb decided %+v\nengine reads %+v", body, decisionOf(&r), want)
		}
		if err != nil {
			return
		}
		in := injection{host: "h", port: &port, rooms: []uint64{5}, batch: r.batch > 0}
		if in.batch {
			in.rooms = make([]uint64, r.batch)
			for i := range in.rooms {
				in.rooms[i] = uint64(100 + i)
			}
		}
		legs := []*injection{&in}
		if r.rankField != "" {
			// As attempt does when the prefill's DP size is known.
			pIn, dIn := dpRanks{prefill: int(r.prefillRank), decode: -1}.legs(&in)
			legs = []*injection{pIn, dIn}
		}
		for _, leg := range legs {
			out := appendInjected(nil, []byte(body), &r, leg)
			if len(out) > injectedCap([]byte(body), &in) {
				t.Fatalf("%q: injected %d bytes, over injectedCap %d", body, len(out), injectedCap([]byte(body), &in))
			}
			checkInjected(t, body, out, &r, leg, opt)
		}
	})
}

// checkInjected reads an injected body as the engine will and holds it to
// the client's body and to what pdlb decided about it.
func checkInjected(t *testing.T, body string, out []byte, r *pdRequest, leg *injection, opt parseOptions) {
	t.Helper()
	got, bad, err := engineRead(out, opt)
	want := decisionOf(r)
	if leg.nranks > 0 {
		want.rankField = leg.ranks[0].key
	}
	if errors.Is(err, errEngineRefusesBody) && !utf8.ValidString(body) {
		// pdlb passes on what it cannot read either; the engine refuses it.
	} else if err != nil || got != want {
		t.Fatalf("%q injected as %q: the engine reads %+v %v %v, pdlb decided %+v", body, out, got, err, bad, want)
	}
	in, outMembers := members(t, []byte(body)), members(t, out)
	var kept []member
	for _, m := range in {
		switch m.key {
		case "bootstrap_host", "bootstrap_port", "bootstrap_room":
			continue
		case keyRoutedRank, keyPrefillRank:
			if leg.nranks > 0 {
				continue
			}
		}
		kept = append(kept, m)
	}
	appended := []string{"bootstrap_host", "bootstrap_port", "bootstrap_room"}
	if leg.nranks > 0 {
		appended = append(appended, leg.ranks[0].key)
	}
	if len(outMembers) != len(kept)+len(appended) {
		t.Fatalf("%q injected as %q: %d members, want %d kept and %v", body, out, len(outMembers), len(kept), appended)
	}
	for i, m := range kept {
		if outMembers[i] != m {
			t.Fatalf("%q injected as %q: member %d is %v, want %v", body, out, i, outMembers[i], m)
		}
	}
	for i, key := range appended {
		m := outMembers[len(kept)+i]
		if m.key != key {
			t.Fatalf("%q injected as %q: member %d is %s, want %s", body, out, len(kept)+i, m.key, key)
		}
		if key == "bootstrap_room" {
			var rooms []uint64
			if (json.Unmarshal([]byte(m.raw), &rooms) == nil) != leg.batch || leg.batch && len(rooms) != r.batch {
				t.Fatalf("%q injected as %q: bootstrap_room %s for a batch of %d", body, out, m.raw, r.batch)
			}
		}
	}
}

// member is one top-level member: its decoded key and its raw value.
type member struct{ key, raw string }

func members(t *testing.T, body []byte) []member {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(body))
	if _, err := dec.Token(); err != nil {
		t.Fatal(err)
	}
	var ms []member
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			t.Fatal(err)
		}
		ms = append(ms, member{key.(string), string(raw)})
	}
	return ms
}

func BenchmarkParseInject(b *testing.B) {
	body := []byte(`{"text":"The capital of France is","sampling_params":{"temperature":0,"max_new_tokens":16},"stream":false,"return_logprob":false}`)
	port := 8998
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		r, err := parseRequest(body, generateRoute)
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
