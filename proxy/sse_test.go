package proxy

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// errBroke is a read error that arrives with the last bytes.
var errBroke = errors.New("connection reset")

// brokeWith returns its data in one read together with err.
type brokeWith struct {
	data string
	err  error
}

func (r *brokeWith) Read(p []byte) (int, error) {
	n := copy(p, r.data)
	r.data = r.data[n:]
	if r.data == "" {
		return n, r.err
	}
	return n, nil
}

// TestSSEReaderSplitsTheBytesThatCameWithTheEnd: a reader may return its
// last bytes together with io.EOF (fasthttp's Content-Length body stream
// does) or with an error; the events in those bytes still come one by
// one, before the end or the error.
func TestSSEReaderSplitsTheBytesThatCameWithTheEnd(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    io.Reader
		want []string
		err  error
	}{
		{"EOF with the last read", iotest.DataErrReader(strings.NewReader("data: a\n\ndata: b\n\ndata: [DONE]\n\n")),
			[]string{"data: a", "data: b", "data: [DONE]"}, io.EOF},
		{"EOF with one read of everything", &brokeWith{"data: a\n\ndata: b\n\n", io.EOF},
			[]string{"data: a", "data: b"}, io.EOF},
		{"unterminated tail", &brokeWith{"data: a\n\ndata: b", io.EOF},
			[]string{"data: a", "data: b"}, io.EOF},
		{"error with the last read", &brokeWith{"data: a\n\ndata: b\n\ndata: c", errBroke},
			[]string{"data: a", "data: b"}, errBroke},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sr := acquireSSEReader(tc.r)
			defer releaseSSEReader(sr)
			var got []string
			var err error
			for {
				var ev []byte
				if ev, err = sr.next(); err != nil {
					break
				}
				got = append(got, string(ev))
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") || !errors.Is(err, tc.err) {
				t.Fatalf("events %q then %v, want %q then %v", got, err, tc.want, tc.err)
			}
			if _, again := sr.next(); !errors.Is(again, tc.err) {
				t.Fatalf("next after the end: %v, want %v again", again, tc.err)
			}
		})
	}
}
