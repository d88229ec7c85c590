package policy

import (
	"strconv"
	"testing"
	"time"

	"pdlb/proxy"
)

// backends builds n decode backends (no engine behind them: policies only
// read their identity and counters).
func backends(t *testing.T, n int) []*proxy.Backend {
	t.Helper()
	out := make([]*proxy.Backend, n)
	for i := range out {
		b, err := proxy.NewBackend("http://10.0.0."+strconv.Itoa(i+1)+":30000", proxy.Decode, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = b
	}
	return out
}

// withInFlight puts n requests in flight on b (released when the test ends).
func withInFlight(t *testing.T, b *proxy.Backend, n int) {
	t.Helper()
	for range n {
		tk, ok := b.Acquire()
		if !ok {
			t.Fatal("acquire refused")
		}
		t.Cleanup(tk.Release)
	}
}

func all(*proxy.Backend) bool { return true }

// only accepts the given backends.
func only(bs ...*proxy.Backend) func(*proxy.Backend) bool {
	return func(b *proxy.Backend) bool {
		for _, x := range bs {
			if x == b {
				return true
			}
		}
		return false
	}
}

// counts picks draws times and counts each backend picked.
func counts(p Policy, cands []*proxy.Backend, ok func(*proxy.Backend) bool, draws int) map[*proxy.Backend]int {
	out := map[*proxy.Backend]int{}
	for range draws {
		b, _ := p.Pick(Request{}, cands, ok)
		out[b]++
	}
	return out
}

// benchBackends builds n prefill backends for benchmarks.
func benchBackends(b *testing.B, n int) []*proxy.Backend {
	out := make([]*proxy.Backend, n)
	for i := range out {
		c, err := proxy.NewBackend("http://10.0."+strconv.Itoa(i/250)+"."+strconv.Itoa(i%250+1)+":30000", proxy.Prefill, 0)
		if err != nil {
			b.Fatal(err)
		}
		out[i] = c
	}
	return out
}
