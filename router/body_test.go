package router

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/valyala/fasthttp"

	"pdlb/config"
	"pdlb/proxy/proxytest"
)

var (
	generateRoute = parseOptions{generate: true, maxBatch: 1024}
	openAIRoute   = parseOptions{maxBatch: 1024}
)

// decision is what parseRequest decided about a body, in a form a test can
// compare with the engine's reading of it.
type decision struct {
	stream, returnLogprob bool
	batch                 int
	rankField             string
	rank                  int64
}

func decisionOf(r *pdRequest) decision {
	return decision{r.stream, r.returnLogprob, r.batch, r.rankField, r.prefillRank}
}

// errEngineRefusesBody marks a body the engine refuses as a whole before
// reading any member (not UTF-8, nested deeper than its parser goes): what
// pdlb decides about it cannot differ from what the engine does.
var errEngineRefusesBody = errors.New("the engine cannot decode this body")

// engineRead reads body as an SGLang engine does: Python's json.loads (the
// last of duplicate members wins) and then pydantic in lax mode, plus pdlb's
// own refusals (DP ranks that are not JSON integers, members pdlb replaces
// repeated more than maxDrops times, batches over the limit). It is written
// apart from parseRequest, on encoding/json's tokens, which see every
// duplicate. bad names the members a refusal may name.
func engineRead(body []byte, opt parseOptions) (d decision, bad map[string]bool, err error) {
	if !utf8.Valid(body) {
		return d, nil, errEngineRefusesBody
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return d, nil, fmt.Errorf("not an object: %v %v", tok, err)
	}
	last := map[string]any{}
	var bootstrap, ranks int
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return d, nil, err
		}
		key := tok.(string)
		var v any
		if err := dec.Decode(&v); err != nil {
			if strings.Contains(err.Error(), "exceeded max depth") {
				return d, nil, errEngineRefusesBody
			}
			return d, nil, err
		}
		last[key] = v
		switch key {
		case "bootstrap_host", "bootstrap_port", "bootstrap_room":
			bootstrap++
		case "routed_dp_rank", "disagg_prefill_dp_rank":
			ranks++
		}
	}
	if _, err := dec.Token(); err != nil {
		return d, nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return d, nil, fmt.Errorf("data after the object: %v", err)
	}
	bad = map[string]bool{}
	if bootstrap > maxDrops {
		bad["bootstrap_host"], bad["bootstrap_port"], bad["bootstrap_room"] = true, true, true
	}
	if ranks > maxDrops {
		bad["routed_dp_rank"], bad["disagg_prefill_dp_rank"] = true, true
	}
	if v, ok := last["stream"]; ok {
		if d.stream, ok = pydanticBool(v); !ok {
			bad["stream"] = true
		}
	}
	if opt.generate {
		readGenerate(last, opt.maxBatch, &d, bad)
	}
	for _, key := range []string{"routed_dp_rank", "disagg_prefill_dp_rank"} {
		switch v := last[key].(type) {
		case nil:
		case json.Number:
			n, ok := new(big.Int).SetString(string(v), 10)
			if !ok || !n.IsInt64() {
				bad[key] = true
				continue
			}
			d.rankField, d.rank = key, n.Int64() // disagg_prefill_dp_rank, read second, wins
		default:
			bad[key] = true
		}
	}
	if len(bad) > 0 {
		return decision{}, bad, errors.New("refused")
	}
	return d, nil, nil
}

// readGenerate reads GenerateReqInput's own members: text decides batch or
// single when it is not null, else input_ids (_determine_batch_size).
func readGenerate(last map[string]any, maxBatch int, d *decision, bad map[string]bool) {
	switch v := last["return_logprob"].(type) {
	case nil:
	case []any:
		for _, item := range v {
			b, ok := pydanticBool(item)
			if !ok {
				bad["return_logprob"] = true
			}
			d.returnLogprob = d.returnLogprob || b
		}
	default:
		var ok bool
		if d.returnLogprob, ok = pydanticBool(v); !ok {
			bad["return_logprob"] = true
		}
	}
	key := "text"
	switch v := last["text"].(type) {
	case nil:
		key = "input_ids"
		switch ids := last["input_ids"].(type) {
		case nil:
		case []any:
			if len(ids) == 0 {
				bad[key] = true
				break
			}
			if _, batch := ids[0].([]any); !batch {
				break
			}
			for _, row := range ids {
				if _, ok := row.([]any); !ok {
					bad[key] = true
				}
			}
			d.batch = len(ids)
		default:
			bad[key] = true
		}
	case string:
	case []any:
		for _, item := range v {
			if _, ok := item.(string); !ok {
				bad[key] = true
			}
		}
		if len(v) == 0 {
			bad[key] = true
		}
		d.batch = len(v)
	default:
		bad[key] = true
	}
	if d.batch > maxBatch {
		bad[key] = true
	}
}

// pydanticBool is pydantic's lax bool (pydantic-core validate_bool and
// str_as_bool) over what Python's json.loads gives: a bool, an int, a float,
// a str.
func pydanticBool(v any) (value, ok bool) {
	switch x := v.(type) {
	case bool:
		return x, true
	case string:
		lower := []byte(x)
		for i, c := range lower {
			if 'A' <= c && c <= 'Z' {
				lower[i] = c + 'a' - 'A'
			}
		}
		switch string(lower) {
		case "0", "f", "n", "no", "off", "false":
			return false, true
		case "1", "t", "y", "on", "yes", "true":
			return true, true
		}
	case json.Number:
		if !strings.ContainsAny(string(x), ".eE") { // a Python int
			n, _ := new(big.Int).SetString(string(x), 10)
			if n.IsInt64() && (n.Int64() == 0 || n.Int64() == 1) {
				return n.Int64() == 1, true
			}
			return false, false
		}
		f, _ := strconv.ParseFloat(string(x), 64) // Python's float(): same rounding
		if f == 0 || f == 1 {
			return f == 1, true
		}
	}
	return false, false
}

// The cases below were checked against pydantic 2.13.4 validating a
// dataclass with GenerateReqInput's annotations for these members
// (text: Optional[Union[List[str], str]], input_ids, return_logprob:
// Optional[Union[List[bool], bool]], stream: bool, the ranks Optional[int])
// after json.loads. pdlb is stricter in two places, marked below: a DP
// rank that is not a JSON integer in int64 range ("1", 1.0, true, 2^70 are
// fine to pydantic) and an empty text list.
func TestParseRequestReadsAsTheEngine(t *testing.T) {
	single := decision{}
	streams := decision{stream: true}
	cases := []struct {
		body string
		want decision
		// refused names the member a refusal names ("" when accepted).
		refused string
	}{
		// The last of duplicate members is the one the engine reads.
		{`{"text":["a","b"],"text":"x"}`, single, ""},
		{`{"text":"x","text":["a","b"]}`, decision{batch: 2}, ""},
		{`{"text":["a","b"],"text":null,"input_ids":[1]}`, single, ""},
		{`{"text":null,"input_ids":[[1],[2]]}`, decision{batch: 2}, ""},
		{`{"input_ids":[[1],[2]],"text":"x"}`, single, ""},
		{`{"input_ids":[[1],[2]],"input_ids":[1,2]}`, single, ""},
		{`{"text":"x","input_ids":[]}`, single, ""},
		{`{"stream":true,"stream":false}`, single, ""},
		{`{"stream":false,"stream":"yes"}`, streams, ""},
		{`{"return_logprob":true,"return_logprob":false}`, single, ""},
		{`{"return_logprob":false,"return_logprob":[0,"on"]}`, decision{returnLogprob: true}, ""},
		{`{"routed_dp_rank":0,"routed_dp_rank":1}`, decision{rankField: "routed_dp_rank", rank: 1}, ""},
		{`{"disagg_prefill_dp_rank":2,"disagg_prefill_dp_rank":null,"routed_dp_rank":1}`, decision{rankField: "routed_dp_rank", rank: 1}, ""},
		{`{"routed_dp_rank":1,"disagg_prefill_dp_rank":3}`, decision{rankField: "disagg_prefill_dp_rank", rank: 3}, ""},
		{`{"\u0073tream":true}`, streams, ""},
		{`{"text":["a"],"te\u0078t":"x"}`, single, ""},
		// Lax bools, as pydantic reads them.
		{`{"stream":"yes"}`, streams, ""},
		{`{"stream":"YES"}`, streams, ""},
		{`{"stream":"tRuE"}`, streams, ""},
		{`{"stream":"on"}`, streams, ""},
		{`{"stream":"t"}`, streams, ""},
		{`{"stream":"y"}`, streams, ""},
		{`{"stream":"1"}`, streams, ""},
		{`{"stream":"\u0079es"}`, streams, ""},
		{`{"stream":"N"}`, single, ""},
		{`{"stream":"off"}`, single, ""},
		{`{"stream":"0"}`, single, ""},
		{`{"stream":1}`, streams, ""},
		{`{"stream":1.0}`, streams, ""},
		{`{"stream":1e0}`, streams, ""},
		{`{"stream":0.99999999999999999}`, streams, ""},
		{`{"stream":0.0}`, single, ""},
		{`{"stream":-0}`, single, ""},
		{`{"stream":-0.0}`, single, ""},
		{`{"stream":1e-400}`, single, ""},
		{`{"stream":" yes"}`, single, "stream"},
		{`{"stream":"2"}`, single, "stream"},
		{`{"stream":"yeſ"}`, single, "stream"},
		{`{"stream":2}`, single, "stream"},
		{`{"stream":1.5}`, single, "stream"},
		{`{"stream":1e400}`, single, "stream"},
		{`{"stream":100000000000000000000}`, single, "stream"},
		{`{"stream":null}`, single, "stream"},
		{`{"stream":[]}`, single, "stream"},
		{`{"return_logprob":"yes"}`, decision{returnLogprob: true}, ""},
		{`{"return_logprob":null}`, single, ""},
		{`{"return_logprob":[]}`, single, ""},
		{`{"return_logprob":[true,null]}`, single, "return_logprob"},
		{`{"return_logprob":"maybe"}`, single, "return_logprob"},
		// Shapes pydantic refuses.
		{`{"text":[1]}`, single, "text"},
		{`{"text":1}`, single, "text"},
		{`{"text":[]}`, single, "text"}, // stricter
		{`{"input_ids":[[1],2]}`, single, "input_ids"},
		{`{"input_ids":"1"}`, single, "input_ids"},
		{`{"input_ids":[]}`, single, "input_ids"},
		{`{"input_ids":[true,2]}`, single, ""},
		// DP ranks: JSON integers only (stricter than pydantic).
		{`{"routed_dp_rank":"1"}`, single, "routed_dp_rank"},
		{`{"routed_dp_rank":1.0}`, single, "routed_dp_rank"},
		{`{"routed_dp_rank":true}`, single, "routed_dp_rank"},
		{`{"routed_dp_rank":1.5}`, single, "routed_dp_rank"},
		{`{"disagg_prefill_dp_rank":99999999999999999999}`, single, "disagg_prefill_dp_rank"},
		{`{"disagg_prefill_dp_rank":1,"routed_dp_rank":"x"}`, single, "routed_dp_rank"},
		{`{"routed_dp_rank":"x","routed_dp_rank":1}`, decision{rankField: "routed_dp_rank", rank: 1}, ""},
	}
	for _, c := range cases {
		r, err := parseRequest([]byte(c.body), generateRoute)
		want, bad, werr := engineRead([]byte(c.body), generateRoute)
		if c.refused != "" {
			if err == nil || !strings.HasPrefix(err.Error(), c.refused+":") {
				t.Errorf("%s: err %v, want a refusal naming %s", c.body, err, c.refused)
			}
			if werr == nil || !bad[c.refused] {
				t.Errorf("%s: the reference reading does not refuse %s: %v", c.body, c.refused, werr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.body, err)
			continue
		}
		if got := decisionOf(&r); got != c.want || want != c.want || werr != nil {
			t.Errorf("%s:\n   pdlb %+v\n engine %+v %v\n   want %+v", c.body, got, want, werr, c.want)
		}
	}
}

// The OpenAI request models have no text, input_ids or return_logprob
// (pydantic ignores unknown members there): pdlb neither reads nor refuses
// them, and never makes a batch of them.
func TestParseRequestOpenAIRoutesIgnoreGenerateMembers(t *testing.T) {
	for _, body := range []string{`{"text":["a","b"]}`, `{"text":5,"input_ids":"x","return_logprob":"maybe"}`, `{"text":[]}`} {
		r, err := parseRequest([]byte(body), openAIRoute)
		if err != nil || decisionOf(&r) != (decision{}) {
			t.Errorf("%s: %+v %v", body, decisionOf(&r), err)
		}
	}
	r, err := parseRequest([]byte(`{"messages":[],"stream":"on","routed_dp_rank":2}`), openAIRoute)
	if err != nil || decisionOf(&r) != (decision{stream: true, rankField: "routed_dp_rank", rank: 2}) {
		t.Errorf("%+v %v", decisionOf(&r), err)
	}
}

func TestParseRequestBatchLimit(t *testing.T) {
	opt := parseOptions{generate: true, maxBatch: 3}
	for body, want := range map[string]string{
		`{"text":["a","b","c","d"]}`:         "text: batch of 4 items exceeds limits.max_batch_size (3)",
		`{"input_ids":[[1],[2],[3],[4],[]]}`: "input_ids: batch of 5 items exceeds limits.max_batch_size (3)",
	} {
		if _, err := parseRequest([]byte(body), opt); err == nil || err.Error() != want {
			t.Errorf("%s: %v, want %q", body, err, want)
		}
	}
	for _, body := range []string{`{"text":["a","b","c"]}`, `{"input_ids":[1,2,3,4,5]}`, `{"text":"x","input_ids":[[1],[2],[3],[4]]}`} {
		if _, err := parseRequest([]byte(body), opt); err != nil {
			t.Errorf("%s: %v", body, err)
		}
	}
	// The OpenAI routes take scalar bootstrap fields: no batch, no limit.
	if _, err := parseRequest([]byte(`{"text":["a","b","c","d"],"prompt":["a","b","c","d"]}`), parseOptions{maxBatch: 3}); err != nil {
		t.Error(err)
	}
}

// TestEnginesReadTheBodyAsPdlbDid: through a real pdlb, the body each engine
// receives means what pdlb decided. The engines read it last-wins (Go's
// encoding/json into a map, like Python's json.loads), so a batch has
// bootstrap lists as long as the batch the engine sees and a single request
// scalars.
func TestEnginesReadTheBodyAsPdlbDid(t *testing.T) {
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	d := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d})
	cases := []struct {
		body  string
		batch int // the batch the engine reads; 0: single
	}{
		{`{"text":["a","b"],"text":"x"}`, 0},
		{`{"text":"x","text":["a","b","c"]}`, 3},
		{`{"input_ids":[[1],[2]],"text":"x"}`, 0},
		{`{"text":["a","b"],"text":null,"input_ids":[[1],[2],[3]]}`, 3},
		{`{"te\u0078t":["a","b"],"bootstrap\u005froom":7}`, 2},
	}
	for _, c := range cases {
		resp, body := proxytest.Post(t, l.URL+"/generate", c.body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", c.body, resp.StatusCode, body)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(d.LastBody(), &m); err != nil {
			t.Fatalf("%s: decode body %s: %v", c.body, d.LastBody(), err)
		}
		var rooms []uint64
		isList := json.Unmarshal(m["bootstrap_room"], &rooms) == nil
		if c.batch == 0 && isList || c.batch > 0 && len(rooms) != c.batch {
			t.Errorf("%s: the decode got bootstrap_room %s, want %d rooms (0: a scalar)", c.body, m["bootstrap_room"], c.batch)
		}
	}
}

// TestLaxStreamValuesAreStreams: pydantic reads "on", "yes" and 1.0 as
// true, so the engine streams; pdlb relays a stream (and closes it at
// [DONE]) instead of waiting for a whole answer that never ends.
func TestLaxStreamValuesAreStreams(t *testing.T) {
	// engine answers as SGLang does: a stream when it reads "stream" as
	// true, whose body it keeps open after [DONE] here.
	engine := func(ctx *fasthttp.RequestCtx) {
		dec := json.NewDecoder(bytes.NewReader(ctx.PostBody()))
		dec.UseNumber()
		var m map[string]any // last-wins, as json.loads
		if err := dec.Decode(&m); err != nil {
			ctx.Error(err.Error(), 400)
			return
		}
		if stream, _ := pydanticBool(m["stream"]); stream {
			sseEngine([]string{`{"text":"a"}`}, 0, true)(ctx)
			return
		}
		proxytest.JSONAnswer(200, `{"text":"a"}`)(ctx)
	}
	p := proxytest.NewEngine(t, engine)
	d := proxytest.NewEngine(t, engine)
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d})
	client := &http.Client{Timeout: 3 * time.Second}
	for body, stream := range map[string]bool{
		`{"text":"x","stream":"on"}`:               true,
		`{"text":"x","stream":"YES"}`:              true,
		`{"text":"x","stream":1.0}`:                true,
		`{"text":"x","stream":false,"stream":"y"}`: true,
		`{"text":"x","stream":true,"stream":"no"}`: false,
	} {
		resp, err := client.Post(l.URL+"/generate", "application/json", strings.NewReader(body))
		resp, got := proxytest.ReadAll(t, resp, err)
		want := `{"text":"a"}`
		if stream {
			want = "data: {\"text\":\"a\"}\n\ndata: [DONE]\n\n"
		}
		if resp.StatusCode != 200 || got != want {
			t.Errorf("%s: %d %q, want %q", body, resp.StatusCode, got, want)
		}
	}
}

// TestBatchOverLimitNeverReachesABackend: a batch beyond
// limits.max_batch_size is a 400 naming the key, answered before any
// backend is contacted.
func TestBatchOverLimitNeverReachesABackend(t *testing.T) {
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	d := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	limit := config.Default().Limits.MaxBatchSize
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d})
	texts := `{"text":[` + strings.Repeat(`"a",`, limit) + `"a"]}`
	ids := `{"input_ids":[` + strings.Repeat(`[1],`, limit) + `[1]],"stream":true}`
	for _, body := range []string{texts, ids} {
		req := fasthttp.AcquireRequest()
		resp := fasthttp.AcquireResponse()
		req.SetRequestURI(l.URL + "/generate")
		req.Header.SetMethod("POST")
		req.SetBodyString(body)
		if err := fasthttp.DoTimeout(req, resp, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		var e proxytest.ErrorBody
		want := fmt.Sprintf("batch of %d items exceeds limits.max_batch_size (%d)", limit+1, limit)
		if resp.StatusCode() != 400 || json.Unmarshal(resp.Body(), &e) != nil || !strings.Contains(e.Error.Message, want) {
			t.Errorf("%.30s…: %d %s, want 400 saying %q", body, resp.StatusCode(), resp.Body(), want)
		}
	}
	if p.Count()+d.Count() != 0 {
		t.Fatalf("a batch over the limit reached the backends (%d, %d)", p.Count(), d.Count())
	}
	// One item fewer is served.
	if resp, body := proxytest.Post(t, l.URL+"/generate", `{"text":[`+strings.Repeat(`"a",`, limit-1)+`"a"]}`); resp.StatusCode != 200 {
		t.Fatalf("a batch at the limit: %d %s", resp.StatusCode, body)
	}
}

// BenchmarkParseRequestBatch: a /generate batch of 1024 prompts with escapes
// (newlines, quotes) is read without a copy of any prompt.
func BenchmarkParseRequestBatch(b *testing.B) {
	item := `"Question:\n\"What is the capital of France?\"\nAnswer:",`
	body := []byte(`{"text":[` + strings.Repeat(item, 1023) + item[:len(item)-1] + `],"sampling_params":{"max_new_tokens":16},"stream":false}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if r, err := parseRequest(body, generateRoute); err != nil || r.batch != 1024 {
			b.Fatal(r.batch, err)
		}
	}
}
