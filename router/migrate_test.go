package router

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pdlb/bench/mock"
	"pdlb/config"
	"pdlb/proxy/proxytest"
)

func withMigrationLimit(n int) lbOption {
	return func(c *config.Config) { c.Retry.MigrationLimit = n }
}

// answer is what a client reads of a /generate stream.
type answer struct {
	ids    []int64
	text   string
	tokens int64  // completion_tokens of the last event
	id     string // meta_info.id of the last event
	events int
	dones  int
	errs   []string
	raw    string
}

// readAnswer splits a stream's body into events and checks that each
// event's output_ids and text extend the previous event's (cumulative,
// as SGLang streams them).
func readAnswer(t *testing.T, body string) answer {
	t.Helper()
	a := answer{raw: body}
	var ids []int64
	for _, ev := range strings.Split(strings.TrimSuffix(body, "\n\n"), "\n\n") {
		d, ok := strings.CutPrefix(ev, "data: ")
		if !ok {
			t.Fatalf("not a data event: %q in %q", ev, body)
		}
		if d == "[DONE]" {
			a.dones++
			continue
		}
		if a.dones > 0 {
			t.Errorf("an event after [DONE]: %q", d)
		}
		var v struct {
			Text      *string `json:"text"`
			OutputIDs []int64 `json:"output_ids"`
			Meta      struct {
				ID               string `json:"id"`
				CompletionTokens int64  `json:"completion_tokens"`
			} `json:"meta_info"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(d), &v); err != nil {
			t.Fatalf("event %q: %v", d, err)
		}
		if v.Error != nil {
			a.errs = append(a.errs, v.Error.Message)
			continue
		}
		if len(v.OutputIDs) < len(ids) || !slices.Equal(v.OutputIDs[:len(ids)], ids) {
			t.Errorf("event %d: output_ids %v do not extend %v", a.events, v.OutputIDs, ids)
		}
		if v.Text == nil || !strings.HasPrefix(*v.Text, a.text) {
			t.Errorf("event %d: text %v does not extend %q", a.events, v.Text, a.text)
		}
		if v.Meta.CompletionTokens != int64(len(v.OutputIDs)) {
			t.Errorf("event %d: completion_tokens %d for %d ids", a.events, v.Meta.CompletionTokens, len(v.OutputIDs))
		}
		if a.events > 0 && v.Meta.ID != a.id {
			t.Errorf("event %d: meta_info.id %q, the stream's is %q", a.events, v.Meta.ID, a.id)
		}
		ids, a.text, a.tokens, a.id = v.OutputIDs, *v.Text, v.Meta.CompletionTokens, v.Meta.ID
		a.events++
	}
	a.ids = ids
	return a
}

func chainedPair(t *testing.T, dieAfter, dieStreams int) (*proxytest.Engine, *proxytest.Engine, *mock.Engine) {
	p, _ := mockEngine(t, mock.Options{Role: mock.RolePrefill, ChainedOutput: true, TokenDelay: -1})
	// OutputLen: SGLang's default max_new_tokens, which pdlb assumes for a
	// request that names none.
	d, dm := mockEngine(t, mock.Options{ChainedOutput: true, OutputLen: 128, DieAfterEvents: dieAfter, DieStreams: dieStreams, TokenDelay: time.Millisecond})
	return p, d, dm
}

// A decode killed after k events: the client reads the same answer as an
// uninterrupted run's (ids, text, completion_tokens, meta_info.id), with
// one [DONE], whether the prompt was ids or text and whether the request
// named max_new_tokens, a rid and a seed or not.
func TestMigrationContinuesTheStream(t *testing.T) {
	const n = 12
	bodies := map[string]string{
		"ids":        `{"input_ids":[11,12,13],"stream":true,"sampling_params":{"temperature":0.7,"max_new_tokens":12,"sampling_seed":9007199254740993}}`,
		"text":       `{"text":"tell me a story","stream":true,"sampling_params":{"max_new_tokens":12}}`,
		"client rid": `{"text":"tell me a story","rid":"abc","stream":true,"sampling_params":{"max_new_tokens":12}}`,
		"no max":     `{"input_ids":[11,12,13],"stream":true}`,
		"null sp":    `{"input_ids":[11,12,13],"stream":true,"sampling_params":null}`,
		"sp, no max": `{"input_ids":[11,12,13],"stream":true,"sampling_params":{"temperature":0}}`,
	}
	for name, body := range bodies {
		for _, k := range []int{1, 4, n - 1, n} {
			t.Run(fmt.Sprintf("%s/k=%d", name, k), func(t *testing.T) {
				p, d, dm := chainedPair(t, k, 1) // its first stream dies, the rest live
				l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d}, withMigrationLimit(1))
				resp, got := proxytest.Post(t, l.URL+"/generate", body)
				if resp.StatusCode != 200 {
					t.Fatalf("%d %s", resp.StatusCode, got)
				}
				if dm.Stats().Deaths != 1 {
					t.Fatalf("the decode died %d times, want 1", dm.Stats().Deaths)
				}
				_, ref := proxytest.Post(t, l.URL+"/generate", body)
				a, want := readAnswer(t, got), readAnswer(t, ref)
				if a.dones != 1 || len(a.errs) > 0 || want.dones != 1 {
					t.Fatalf("migrated: %d [DONE], errors %q; uninterrupted: %d [DONE]\n%s", a.dones, a.errs, want.dones, a.raw)
				}
				if len(want.ids) < n || !reflect.DeepEqual(a.ids, want.ids) || a.text != want.text || a.tokens != want.tokens ||
					name == "client rid" && a.id != want.id {
					t.Errorf("migrated answer\n ids %v\n text %q tokens %d id %q\nuninterrupted\n ids %v\n text %q tokens %d id %q",
						a.ids, a.text, a.tokens, a.id, want.ids, want.text, want.tokens, want.id)
				}
				_, m := proxytest.Get(t, l.URL+"/metrics")
				result := "resumed"
				if k == len(want.ids) {
					result = "finished" // only [DONE] was missing
				}
				if !strings.Contains(m, `pdlb_migrations_total{result="`+result+`"} 1`) {
					t.Errorf("no migration counted as %s: %s", result, grepLines(m, "migrations"))
				}
			})
		}
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// Several streams at once, each killed mid-way, each continued to the
// answer its prompt gets uninterrupted.
func TestMigrationOfConcurrentStreams(t *testing.T) {
	const streams = 6
	p, d, dm := chainedPair(t, 3, streams)
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d}, withMigrationLimit(1))
	body := func(i int) string {
		return fmt.Sprintf(`{"input_ids":[%d,7,8],"stream":true,"sampling_params":{"max_new_tokens":10}}`, 100+i)
	}
	got := make([]string, streams)
	var wg sync.WaitGroup
	for i := range streams {
		wg.Go(func() { _, got[i] = proxytest.Post(t, l.URL+"/generate", body(i)) })
	}
	wg.Wait()
	if dm.Stats().Deaths != streams {
		t.Fatalf("%d deaths, want %d", dm.Stats().Deaths, streams)
	}
	for i := range streams {
		_, ref := proxytest.Post(t, l.URL+"/generate", body(i))
		a, want := readAnswer(t, got[i]), readAnswer(t, ref)
		if a.dones != 1 || len(a.errs) > 0 || !reflect.DeepEqual(a.ids, want.ids) || a.text != want.text || len(want.ids) != 10 {
			t.Errorf("stream %d: ids %v text %q (%d [DONE], errors %q), want %v %q", i, a.ids, a.text, a.dones, a.errs, want.ids, want.text)
		}
	}
}

// Two breaks of one stream, two continuations: each continues from the
// client's own prompt with everything sent so far.
func TestMigrationTwice(t *testing.T) {
	for _, body := range []string{
		`{"input_ids":[2,7,1],"stream":true,"sampling_params":{"max_new_tokens":11}}`,
		`{"text":"once upon","stream":true,"sampling_params":{"max_new_tokens":11}}`,
	} {
		p, d, dm := chainedPair(t, 3, 2) // its first two streams die after 3 events
		l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d}, withMigrationLimit(2))
		_, got := proxytest.Post(t, l.URL+"/generate", body)
		if dm.Stats().Deaths != 2 {
			t.Fatalf("%d deaths, want 2", dm.Stats().Deaths)
		}
		_, ref := proxytest.Post(t, l.URL+"/generate", body)
		a, want := readAnswer(t, got), readAnswer(t, ref)
		if a.dones != 1 || len(a.errs) > 0 || len(want.ids) != 11 || !reflect.DeepEqual(a.ids, want.ids) || a.text != want.text || a.tokens != 11 {
			t.Errorf("%s: migrated twice %v %q (%d [DONE], errors %q), uninterrupted %v %q", body, a.ids, a.text, a.dones, a.errs, want.ids, want.text)
		}
	}
}

// migration_limit 0 keeps the error event; a limit reached ends with it too.
func TestMigrationLimit(t *testing.T) {
	for _, c := range []struct {
		limit, deaths int
		result        string
	}{{0, 1, ""}, {1, 2, "exhausted"}, {2, 3, "exhausted"}} {
		t.Run(fmt.Sprint(c.limit), func(t *testing.T) {
			p, d, dm := chainedPair(t, 2, 0) // every stream dies after 2 events
			l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d}, withMigrationLimit(c.limit))
			_, got := proxytest.Post(t, l.URL+"/generate", `{"input_ids":[1,2],"stream":true,"sampling_params":{"max_new_tokens":20}}`)
			a := readAnswer(t, got)
			if a.dones != 0 || len(a.errs) != 1 || !strings.Contains(a.errs[0], "decode "+d.URL) {
				t.Fatalf("want the events, then one error event naming the decode, no [DONE]: %q", got)
			}
			if a.events != 2*c.deaths || len(a.ids) != 2*c.deaths {
				t.Errorf("%d events, %d ids, want %d each", a.events, len(a.ids), 2*c.deaths)
			}
			if int(dm.Stats().Deaths) != c.deaths {
				t.Errorf("%d streams died, want %d", dm.Stats().Deaths, c.deaths)
			}
			_, m := proxytest.Get(t, l.URL+"/metrics")
			if c.result == "" {
				if strings.Contains(m, "pdlb_migrations_total") {
					t.Errorf("migration off, yet %s", grepLines(m, "migrations"))
				}
			} else if !strings.Contains(m, `pdlb_migrations_total{result="exhausted"} 1`) ||
				!strings.Contains(m, fmt.Sprintf(`pdlb_migrations_total{result="resumed"} %d`, c.limit)) {
				t.Errorf("metrics: %s", grepLines(m, "migrations"))
			}
		})
	}
}

// A non-streamed request is never migrated: its decode answers only when it
// has finished, so there are no tokens to continue from, and the engine
// may have done (and been paid for) the whole generation. It fails as
// before (here with retries off: one attempt, a 502).
func TestMigrationNeverRerunsNonStream(t *testing.T) {
	p, _ := mockEngine(t, mock.Options{Role: mock.RolePrefill, ChainedOutput: true, TokenDelay: -1})
	d, dm := mockEngine(t, mock.Options{ChainedOutput: true, DieMidStreamProb: 1, TokenDelay: time.Millisecond})
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d}, withMigrationLimit(3))
	resp, body := proxytest.Post(t, l.URL+"/generate", `{"input_ids":[1,2],"sampling_params":{"max_new_tokens":8}}`)
	if resp.StatusCode != 502 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if n := dm.Stats().Requests["/generate"]; n != 1 {
		t.Errorf("the decode was asked %d times, want once", n)
	}
	_, m := proxytest.Get(t, l.URL+"/metrics")
	if strings.Contains(m, "pdlb_migrations_total{") {
		t.Errorf("a non-stream request migrated: %s", grepLines(m, "migrations"))
	}
}

// A decode that stops sending mid-stream (stream idle timeout) is aborted by
// its rid and the stream continues on a fresh leg whose rid that abort
// cannot reach (SGLang aborts by prefix).
func TestMigrationAfterIdleTimeout(t *testing.T) {
	p, _ := mockEngine(t, mock.Options{Role: mock.RolePrefill, ChainedOutput: true, TokenDelay: -1})
	d, dm := mockEngine(t, mock.Options{ChainedOutput: true, StallAfterEvents: 3, DieStreams: 1, TokenDelay: time.Millisecond})
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d}, withMigrationLimit(1), func(c *config.Config) {
		c.Timeouts.DecodeIdle = 300 * time.Millisecond
		c.Abort = config.Abort{Enabled: true, Timeout: time.Second, MaxInFlight: 8}
	})
	const body = `{"input_ids":[3,1,4,1,5],"rid":"abc","stream":true,"sampling_params":{"max_new_tokens":9}}`
	_, got := proxytest.Post(t, l.URL+"/generate", body)
	if dm.Stats().Stalls != 1 {
		t.Fatalf("%d streams stalled, want 1", dm.Stats().Stalls)
	}
	_, ref := proxytest.Post(t, l.URL+"/generate", body)
	a, want := readAnswer(t, got), readAnswer(t, ref)
	if a.dones != 1 || len(a.errs) > 0 || len(want.ids) != 9 || !reflect.DeepEqual(a.ids, want.ids) || a.text != want.text || a.id != "abc" {
		t.Fatalf("migrated %v %q id %q (%d [DONE], errors %q), uninterrupted %v %q", a.ids, a.text, a.id, a.dones, a.errs, want.ids, want.text)
	}
	if !proxytest.WaitFor(5*time.Second, func() bool { return slices.Contains(dm.Stats().Aborted, "abc") }) {
		t.Errorf("the stalled leg was not aborted: %q", dm.Stats().Aborted)
	}
	if ab := dm.Stats().Aborted; slices.Contains(ab, "m1-abc") {
		t.Errorf("the continuation was aborted: %q", ab)
	}
}

// A client that leaves while its continuation waits for the decode's first
// byte is a client gone (499), not an error event nobody reads.
func TestMigrationClientGoneMeanwhile(t *testing.T) {
	p := proxytest.NewEngine(t, sseEngine([]string{`{}`}, 0, false))
	var legs atomic.Int32
	d := proxytest.ConnEngine(t, func(c net.Conn, br *bufio.Reader, _ []byte) {
		if legs.Add(1) == 1 { // two events, then the engine is gone
			c.Write([]byte(sseHead))
			c.Write([]byte(chunk(`data: {"text":" a","output_ids":[7],"meta_info":{"id":"x","finish_reason":null,"completion_tokens":1}}` + "\n\n")))
			c.Write([]byte(chunk(`data: {"text":" a b","output_ids":[7,8],"meta_info":{"id":"x","finish_reason":null,"completion_tokens":2}}` + "\n\n")))
			return
		}
		br.ReadByte() // the continuation: working on it until pdlb hangs up
	})
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d}, withMigrationLimit(1))
	c, err := net.Dial("tcp", strings.TrimPrefix(l.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	const body = `{"input_ids":[1],"stream":true}`
	fmt.Fprintf(c, "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	br := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for seen := ""; !strings.Contains(seen, `"completion_tokens":2`); {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the stream: %v (so far %q)", err, seen)
		}
		seen += line
	}
	if !proxytest.WaitFor(5*time.Second, func() bool { return legs.Load() == 2 }) {
		t.Fatal("no continuation reached the decode")
	}
	c.Close()
	if !proxytest.WaitFor(5*time.Second, func() bool {
		_, m := proxytest.Get(t, l.URL+"/metrics")
		return strings.Contains(m, `pdlb_requests_total{route="/generate",status="499"} 1`) &&
			strings.Contains(m, `pdlb_migrations_total{result="failed"} 1`)
	}) {
		_, m := proxytest.Get(t, l.URL+"/metrics")
		t.Fatalf("want one 499 and one failed migration: %s", grepLines(m, "/generate\",status=")+"\n"+grepLines(m, "migrations_total{"))
	}
}

// The continuation's body is the client's with only the prompt,
// max_new_tokens and the rid changed: every other byte (a 2^63-1 seed
// included) is the client's.
func TestContinuationBody(t *testing.T) {
	const last = `data: {"text":" a \"b\"\n","output_ids":[1001,1002],"meta_info":{"id":"x","finish_reason":null,"completion_tokens":2}}`
	for _, c := range []struct{ body, want string }{
		{`{"input_ids":[1, 2],"stream":true,"sampling_params":{"max_new_tokens":10,"sampling_seed":9223372036854775807}}`,
			`{"input_ids":[1, 2,1001,1002],"stream":true,"sampling_params":{"max_new_tokens":8,"sampling_seed":9223372036854775807}}`},
		{`{"text":"say \"hi\"","stream":true,"rid":"r1","sampling_params":{"temperature":0.5}}`,
			`{"text":"say \"hi\" a \"b\"\n","stream":true,"rid":"m1-r1","sampling_params":{"max_new_tokens":126,"temperature":0.5}}`},
		{`{"text":"x","stream":true}`, `{"sampling_params":{"max_new_tokens":126},"text":"x a \"b\"\n","stream":true}`},
		{`{"text":"x","sampling_params":null,"stream":true}`, `{"text":"x a \"b\"\n","sampling_params":{"max_new_tokens":126},"stream":true}`},
		{`{"text":"x","sampling_params":{"max_new_tokens":null},"stream":true}`, `{"text":"x a \"b\"\n","sampling_params":{"max_new_tokens":126},"stream":true}`},
		{`{"text":"x","sampling_params":{},"stream":true}`, `{"text":"x a \"b\"\n","sampling_params":{"max_new_tokens":126},"stream":true}`},
		{`{"text":"x","sampling_params":{"max_new_tokens":2},"stream":true}`, ``}, // nothing left to generate
	} {
		p, err := parseRequest([]byte(c.body), parseOptions{generate: true, maxBatch: 8})
		if err != nil {
			t.Fatal(err)
		}
		s, err := readSent([]byte(last))
		if err != nil {
			t.Fatal(err)
		}
		got, err := continuation([]byte(c.body), &p, []sent{s}, []int{0}, 1)
		if err != nil || string(got) != c.want {
			t.Errorf("%s\n got %s (%v)\nwant %s", c.body, got, err, c.want)
		}
	}
}

// readBatch splits a batch stream's events by index and reads each item's
// answer; it returns them and the number of [DONE] events.
func readBatch(t *testing.T, body string, items int) ([]answer, int) {
	t.Helper()
	groups := make([]string, items)
	dones := 0
	for _, ev := range strings.Split(strings.TrimSuffix(body, "\n\n"), "\n\n") {
		if ev == "data: [DONE]" {
			dones++
			continue
		}
		var v struct {
			Index *int `json:"index"`
		}
		if err := json.Unmarshal([]byte(strings.TrimPrefix(ev, "data: ")), &v); err != nil || v.Index == nil || *v.Index < 0 || *v.Index >= items {
			t.Fatalf("event without a valid index: %q (%v) in %q", ev, err, body)
		}
		groups[*v.Index] += ev + "\n\n"
	}
	out := make([]answer, items)
	for i, g := range groups {
		out[i] = readAnswer(t, g)
	}
	return out, dones
}

// Batches: each item continues to the answer its prompt gets uninterrupted,
// its events keeping its own index, meta_info.id and cumulative text/ids.
func TestMigrationOfBatches(t *testing.T) {
	const n = 8
	bodies := map[string]string{
		"ids, 2":             `{"input_ids":[[1,2],[3,4,5]],"stream":true,"sampling_params":{"max_new_tokens":8}}`,
		"text, 3":            `{"text":["one","two words","three more words"],"stream":true,"sampling_params":{"max_new_tokens":8}}`,
		"text, 3, rid":       `{"text":["one","two words","three more words"],"rid":"b","stream":true,"sampling_params":{"max_new_tokens":8}}`,
		"ids, 2, rid list":   `{"input_ids":[[1,2],[3,4,5]],"rid":["x","y"],"stream":true,"sampling_params":{"max_new_tokens":8}}`,
		"ids, 4, no max_new": `{"input_ids":[[1],[2],[3],[4]],"stream":true}`,
	}
	for name, body := range bodies {
		items := strings.Count(name, "4")*4 + strings.Count(name, "3")*3 + strings.Count(name, "2")*2
		for _, k := range []int{1, 3, n} {
			t.Run(fmt.Sprintf("%s/k=%d", name, k), func(t *testing.T) {
				p, d, dm := chainedPair(t, k, 1)
				l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d}, withMigrationLimit(1))
				resp, got := proxytest.Post(t, l.URL+"/generate", body)
				if resp.StatusCode != 200 || dm.Stats().Deaths != 1 {
					t.Fatalf("%d, %d deaths: %s", resp.StatusCode, dm.Stats().Deaths, got)
				}
				_, ref := proxytest.Post(t, l.URL+"/generate", body)
				as, dones := readBatch(t, got, items)
				wants, refDones := readBatch(t, ref, items)
				if dones != 1 || refDones != 1 {
					t.Fatalf("%d [DONE] migrated, %d uninterrupted:\n%s", dones, refDones, got)
				}
				for i := range items {
					a, want := as[i], wants[i]
					if len(a.errs) > 0 || len(want.ids) < n || !reflect.DeepEqual(a.ids, want.ids) || a.text != want.text || a.tokens != want.tokens {
						t.Errorf("item %d: migrated %v %q (%d tokens, errors %q), uninterrupted %v %q (%d)", i, a.ids, a.text, a.tokens, a.errs, want.ids, want.text, want.tokens)
					}
					if strings.Contains(name, "rid") && a.id != want.id {
						t.Errorf("item %d: meta_info.id %q, uninterrupted %q", i, a.id, want.id)
					}
				}
			})
		}
	}
}
