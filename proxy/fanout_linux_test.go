//go:build linux

package proxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"pdlb/proxy/proxytest"
)

// TestClientGoneCutsBothLegs: a client that closes its connection while
// both legs wait (for KV, for the first token) ends the attempt with
// ErrClientGone within moments, and both engines see their connection
// closed: nobody computes an answer no one will read.
func TestClientGoneCutsBothLegs(t *testing.T) {
	for _, stream := range []bool{false, true} {
		name := "non-stream"
		if stream {
			name = "stream waiting for its first event"
		}
		t.Run(name, func(t *testing.T) {
			pe, prefillWorks := holdingEngine(t)
			decodeWaits := make(chan struct{}, 1)
			de := proxytest.ConnEngine(t, func(c net.Conn, br *bufio.Reader, _ []byte) {
				if stream {
					c.Write([]byte(sseHead))
				}
				decodeWaits <- struct{}{}
				io.Copy(io.Discard, br)
			})
			pr := newPDPair(t, pe.URL, de.URL)
			server, client := tcpPair(t)
			x := pr.exchange(t, stream)
			x.ClientConn = server
			type result struct {
				err *UpstreamError
				at  time.Time
			}
			done := make(chan result, 1)
			go func() {
				ans, err := pr.px.Do(x)
				if ans != nil {
					t.Errorf("Do answered %+v", ans)
				}
				done <- result{err, time.Now()}
			}()
			waitOn(t, prefillWorks, "the prefill's request")
			waitOn(t, decodeWaits, "the decode's request")
			left := time.Now()
			client.Close()
			var r result
			select {
			case r = <-done:
			case <-time.After(2 * time.Second):
				t.Fatal("Do still waits after the client left")
			}
			if r.err == nil || r.err.Kind != KindCancelled || !errors.Is(r.err, ErrClientGone) {
				t.Fatalf("error %v, want ErrClientGone", r.err)
			}
			// The watch starts watchDelay into the attempt; a close before
			// that is seen as soon as it starts.
			if el := r.at.Sub(left); el > watchDelay+150*time.Millisecond {
				t.Errorf("Do returned %v after the client left", el)
			}
			if !pe.WaitClosed(time.Second) || !de.WaitClosed(time.Second) {
				t.Fatal("a leg's connection was left open")
			}
			pr.settled(t)
			if p, d := outcomesOf(pr.p), outcomesOf(pr.d); p != (outcomes{excluded: 1}) || d != (outcomes{excluded: 1}) {
				t.Errorf("breakers told prefill %+v, decode %+v: a departed client is no backend's failure", p, d)
			}
		})
	}
}
