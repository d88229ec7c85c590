package proxy

import (
	"bufio"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"pdlb/proxy/proxytest"
)

// legRecorder is a LegObserver that keeps what it heard.
type legRecorder struct {
	mu       sync.Mutex
	answered map[*Backend]int
	done     map[*Backend][]Kind // 0 for success
}

func newLegRecorder() *legRecorder {
	return &legRecorder{answered: map[*Backend]int{}, done: map[*Backend][]Kind{}}
}

func (r *legRecorder) LegAnswered(b *Backend, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if d < 0 {
		panic("negative answer time")
	}
	r.answered[b]++
}

func (r *legRecorder) LegDone(b *Backend, err *UpstreamError) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var k Kind
	if err != nil {
		k = err.Kind
	}
	r.done[b] = append(r.done[b], k)
}

// heard returns, per backend, how often it answered and how its legs ended.
func (r *legRecorder) heard(b *Backend) (int, []Kind) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.answered[b], append([]Kind(nil), r.done[b]...)
}

// TestObserverHearsEveryLeg: each leg is reported done exactly once, as its
// breaker is told, and answered only when it answered: a non-stream pair,
// a stream (the decode done when the relay ends, the prefill once its
// stream is read to the end), and a failed prefill that cuts the decode.
func TestObserverHearsEveryLeg(t *testing.T) {
	t.Run("non-stream", func(t *testing.T) {
		pe := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
		de := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
		pr := newPDPair(t, pe.URL, de.URL)
		rec := newLegRecorder()
		pr.px.SetObserver(rec)
		ans, err := pr.px.Do(pr.exchange(t, false))
		if err != nil {
			t.Fatal(err)
		}
		ans.Release()
		pr.settled(t)
		wantHeard(t, rec, pr.p, 1, []Kind{0})
		wantHeard(t, rec, pr.d, 1, []Kind{0})
	})
	t.Run("stream", func(t *testing.T) {
		pe := sseEngine(t, "data: {}\n\ndata: [DONE]\n\n")
		de := sseEngine(t, "data: {\"text\":\"a\"}\n\ndata: [DONE]\n\n")
		pr := newPDPair(t, pe.URL, de.URL)
		rec := newLegRecorder()
		pr.px.SetObserver(rec)
		ans, err := pr.px.Do(pr.exchange(t, true))
		if err != nil {
			t.Fatal(err)
		}
		if n, done := rec.heard(pr.d); n != 1 || len(done) != 0 {
			t.Fatalf("decode committed: answered %d, done %v; want answered once, not done before the relay", n, done)
		}
		if res := relay(t, ans.Stream, &clientRecorder{}); res.Err != nil {
			t.Fatal(res.Err)
		}
		pr.settled(t)
		if !proxytest.WaitFor(2*time.Second, func() bool { n, _ := rec.heard(pr.p); return n == 1 }) {
			t.Fatal("the prefill's drained stream was not reported answered")
		}
		wantHeard(t, rec, pr.p, 1, []Kind{0})
		wantHeard(t, rec, pr.d, 1, []Kind{0})
	})
	t.Run("prefill fails", func(t *testing.T) {
		pe := proxytest.NewEngine(t, proxytest.JSONAnswer(500, `{"error":"boom"}`))
		de := proxytest.ConnEngine(t, func(_ net.Conn, br *bufio.Reader, _ []byte) { io.Copy(io.Discard, br) })
		pr := newPDPair(t, pe.URL, de.URL)
		rec := newLegRecorder()
		pr.px.SetObserver(rec)
		if _, err := pr.px.Do(pr.exchange(t, false)); err == nil || err.Backend != pr.p {
			t.Fatalf("Do: %v, want the prefill's error", err)
		}
		pr.settled(t)
		wantHeard(t, rec, pr.p, 0, []Kind{KindStatus})
		wantHeard(t, rec, pr.d, 0, []Kind{KindCancelled})
	})
}

// wantHeard waits (the observer hears a leg just after its ticket is
// settled) until rec heard what is wanted of b, failing the test if not.
func wantHeard(t *testing.T, rec *legRecorder, b *Backend, answered int, done []Kind) {
	t.Helper()
	var n int
	var got []Kind
	if !proxytest.WaitFor(2*time.Second, func() bool {
		n, got = rec.heard(b)
		return n == answered && slices.Equal(got, done)
	}) {
		t.Errorf("%s: answered %d, done %v; want %d, %v", b.Role, n, got, answered, done)
	}
}
