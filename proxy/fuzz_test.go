package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"
	"testing/iotest"

	"github.com/tidwall/gjson"
)

// cutReader serves data in reads whose sizes cycle through cuts (0 means
// one byte), the way TCP may split an engine's writes.
type cutReader struct {
	data []byte
	cuts []byte
	i    int
}

func (r *cutReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := 1
	if len(r.cuts) > 0 {
		n = max(1, int(r.cuts[r.i%len(r.cuts)]))
		r.i++
	}
	n = min(n, len(p), len(r.data))
	copy(p, r.data[:n])
	r.data = r.data[n:]
	return n, nil
}

// FuzzSSEReader feeds arbitrary bytes, cut into arbitrary reads, through
// the relay's event splitter: it never panics, no event contains a
// boundary, and the events are the input's non-blank pieces in order.
func FuzzSSEReader(f *testing.F) {
	f.Add([]byte("data: {\"text\":\"a\"}\n\ndata: [DONE]\n\n"), []byte{1})
	f.Add([]byte("data: a\n\n\n\ndata: b\n\n"), []byte{3, 1, 7})
	f.Add([]byte("event: x\ndata: y\n\ndata: tail without boundary"), []byte{0})
	f.Add([]byte("\n\n\n\n \n\n"), []byte{2})
	f.Add([]byte("data: a\r\n\r\ndata: b\n\n"), []byte{5})
	f.Add(bytes.Repeat([]byte("x"), 40<<10), []byte{255}) // grows past the initial buffer
	f.Add([]byte("data: a\n\ndata: b\n\n"), []byte{255})  // one read, io.EOF with it
	f.Fuzz(func(t *testing.T, data, cuts []byte) {
		sr := &sseReader{max: 64 << 10} // bounded memory: a small event limit
		var r io.Reader = &cutReader{data: data, cuts: cuts}
		if len(cuts)%2 == 1 {
			// Some readers bring io.EOF with the last bytes (fasthttp's
			// Content-Length body stream does).
			r = iotest.DataErrReader(r)
		}
		sr.reset(r)
		var got [][]byte
		var err error
		for {
			var ev []byte
			ev, err = sr.next()
			if err != nil {
				break
			}
			if len(bytes.TrimSpace(ev)) == 0 {
				t.Fatalf("blank event returned: %q", ev)
			}
			if bytes.Contains(ev, eventBoundary) {
				t.Fatalf("event %q contains the boundary", ev)
			}
			if len(ev) > sr.max {
				t.Fatalf("event of %d bytes past the %d limit", len(ev), sr.max)
			}
			got = append(got, append([]byte(nil), ev...))
			if len(got) > len(data)+1 {
				t.Fatalf("%d events from %d bytes", len(got), len(data))
			}
		}
		if len(sr.buf) > sr.max {
			t.Fatalf("buffer grew to %d bytes, limit %d", len(sr.buf), sr.max)
		}
		if errors.Is(err, errEventTooLarge) {
			// Some run of len(data) without a boundary exceeded the limit.
			if len(data) < sr.max {
				t.Fatalf("event too large from %d bytes of input", len(data))
			}
			return
		}
		if !errors.Is(err, io.EOF) {
			t.Fatalf("unexpected error %v", err)
		}
		want := expectedEvents(data)
		if len(got) != len(want) {
			t.Fatalf("got %d events %q, want %d %q", len(got), got, len(want), want)
		}
		for i := range want {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("event %d = %q, want %q", i, got[i], want[i])
			}
		}
	})
}

// expectedEvents is the reference split: pieces between "\n\n" boundaries
// (scanning left to right), blank ones dropped, an unterminated tail
// trimmed of white space.
func expectedEvents(data []byte) [][]byte {
	var out [][]byte
	for {
		i := bytes.Index(data, eventBoundary)
		if i < 0 {
			break
		}
		if ev := data[:i]; len(bytes.TrimSpace(ev)) > 0 {
			out = append(out, ev)
		}
		data = data[i+2:]
	}
	if tail := bytes.TrimSpace(data); len(tail) > 0 {
		out = append(out, tail)
	}
	return out
}

// FuzzLogprobMerge feeds arbitrary decode and prefill answers to the
// logprob merge: it never panics, and when both answers are valid JSON the
// merged answer is too, with the prefill's input_token_logprobs in front
// of the decode's.
func FuzzLogprobMerge(f *testing.F) {
	f.Add([]byte(`{"text":"b","meta_info":{"input_token_logprobs":[[-0.5,3,null]]}}`),
		[]byte(`{"meta_info":{"input_token_logprobs":[[null,1,null],[-1.5,2,null]]}}`))
	f.Add([]byte(`[{"meta_info":{"input_token_logprobs":[]}},{"meta_info":{"input_token_logprobs":[[-1,9,null]]}}]`),
		[]byte(`[{"meta_info":{"input_token_logprobs":[[null,1,null]]}},{"meta_info":{"input_token_logprobs":[ ]}}]`))
	f.Add([]byte(`{"meta_info":{"input_token_logprobs":null}}`), []byte(`{"meta_info":{"input_token_logprobs":[1]}}`))
	f.Add([]byte(`{"error":"x"}`), []byte(`not json`))
	f.Add([]byte(`{"meta_info":{"input_token_logprobs":[ 1 , 2 ]}}`), []byte(`{"meta_info":{"input_token_logprobs":[ ]}}`))
	f.Add([]byte(`[]`), []byte(`{}`))
	f.Fuzz(func(t *testing.T, decode, prefill []byte) {
		out := mergeNonStream(nil, decode, prefill)
		inner, ok := prefillLogprobs(prefill, -1)
		obj := appendMergedObject(nil, decode, logprobPath, inner)
		if !ok {
			obj = appendMergedObject(nil, decode, logprobPath, "")
		}
		if !json.Valid(decode) || !json.Valid(prefill) {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("mergeNonStream(%q, %q) = %q: not JSON", decode, prefill, out)
		}
		if !json.Valid(obj) {
			t.Fatalf("appendMergedObject(%q, %q) = %q: not JSON", decode, inner, obj)
		}
		d, p := gjson.ParseBytes(decode), gjson.ParseBytes(prefill)
		if d.IsArray() {
			for i, item := range d.Array() {
				checkMerged(t, item.Get(logprobPath), p.Get(itoa(i)+"."+logprobPath), gjson.GetBytes(out, itoa(i)+"."+logprobPath), out)
			}
			return
		}
		checkMerged(t, d.Get(logprobPath), p.Get(logprobPath), gjson.GetBytes(out, logprobPath), out)
		if d.Get(logprobPath).IsArray() && p.Get(logprobPath).IsArray() && !bytes.Equal(obj, out) {
			t.Fatalf("stream merge %q and plain merge %q differ", obj, out)
		}
	})
}

// checkMerged: when both sides hold arrays, the merged array is the
// prefill's elements followed by the decode's.
func checkMerged(t *testing.T, d, p, merged gjson.Result, out []byte) {
	t.Helper()
	if !d.IsArray() || !p.IsArray() || d.Index <= 0 {
		return
	}
	want := append(p.Array(), d.Array()...)
	got := merged.Array()
	if !merged.IsArray() || len(got) != len(want) {
		t.Fatalf("merged %s has %d elements, want %d+%d (in %q)", merged.Raw, len(got), len(p.Array()), len(d.Array()), out)
	}
	for i := range want {
		if got[i].Raw != want[i].Raw {
			t.Fatalf("element %d = %s, want %s (in %q)", i, got[i].Raw, want[i].Raw, out)
		}
	}
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}
