package load

import (
	"bufio"
	"context"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/valyala/fasthttp"
)

func TestStreamTTFTAndITL(t *testing.T) {
	const delay = 15 * time.Millisecond
	url := serve(t, engine(delay))
	rep, err := Run(context.Background(), Options{
		Targets: []string{url}, Stream: true, Requests: 6, Concurrency: 3, OutputLen: Dist{5, 5},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Targets[0].Rounds[0]
	if r.Completed != 6 || r.Failed != 0 {
		t.Fatalf("completed=%d errors=%v", r.Completed, r.Errors)
	}
	if r.Events != 30 || r.OutputTokens != 30 {
		t.Errorf("events=%d tokens=%d, want 30 each (6 streams × 5)", r.Events, r.OutputTokens)
	}
	if r.TTFT.Count != 6 || r.ITL.Count != 24 {
		t.Errorf("TTFT samples %d, ITL samples %d; want 6 and 24", r.TTFT.Count, r.ITL.Count)
	}
	// Every gap is at least the server's sleep (the histogram may round down by < 1/128).
	floor := float64(delay) / float64(time.Millisecond) * (1 - 1.0/128)
	if r.ITL.P50 < floor || r.ITL.Max < floor {
		t.Errorf("ITL p50 %.2f ms, max %.2f ms; want ≥ %v", r.ITL.P50, r.ITL.Max, delay)
	}
	// The first event is sent at once, so TTFT is well below the 4 gaps that follow it.
	if r.TTFT.Max <= 0 || r.TTFT.P50 >= 4*delay.Seconds()*1000 || r.Latency.P50 < 4*floor {
		t.Errorf("TTFT p50 %.2f ms, latency p50 %.2f ms", r.TTFT.P50, r.Latency.P50)
	}
}

func TestStreamFailures(t *testing.T) {
	stream := func(body string) fasthttp.RequestHandler {
		return func(ctx *fasthttp.RequestCtx) {
			ctx.SetContentType("text/event-stream")
			ctx.SetBodyStreamWriter(func(w *bufio.Writer) { w.WriteString(body) })
		}
	}
	for _, tc := range []struct{ name, body, class string }{
		{"error event", "data: {\"text\":\"a\"}\n\ndata: {\"error\":{\"message\":\"decode died\"}}\n\ndata: [DONE]\n\n", ErrStreamError},
		{"no done", "data: {\"text\":\"a\"}\n\n", ErrStreamTruncated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := serve(t, stream(tc.body))
			rep, err := Run(context.Background(), Options{Targets: []string{url}, Stream: true, Requests: 2, Concurrency: 1})
			if err != nil {
				t.Fatal(err)
			}
			if r := rep.Targets[0].Rounds[0]; r.Errors[tc.class] != 2 {
				t.Errorf("errors = %v, want 2 × %s", r.Errors, tc.class)
			}
		})
	}
}

func TestSSEFramingAcrossReads(t *testing.T) {
	body := ": keep-alive\n\ndata: {\"a\":1}\r\n\r\ndata:{\"a\":2}\n\nevent: x\ndata: {\"usage\":{\"completion_tokens\":9}}\n\ndata: [DONE]\n\n"
	var s sseReader
	gaps := 0
	res, err := s.read(iotest.OneByteReader(strings.NewReader(body)), time.Now(), func(time.Duration) { gaps++ })
	if err != nil {
		t.Fatal(err)
	}
	if res.events != 3 || gaps != 2 || !res.done || res.errEvent {
		t.Errorf("events=%d gaps=%d done=%v err=%v, want 3/2/true/false", res.events, gaps, res.done, res.errEvent)
	}
	if n := answerUsage(s.last).completion; n != 9 {
		t.Errorf("usage from the last event = %d, want 9", n)
	}
}

func TestStreamStallMidwayTimesOut(t *testing.T) {
	stall := make(chan struct{})
	url := serve(t, func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("text/event-stream")
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			w.WriteString("data: {\"text\":\"a\"}\n\n")
			w.Flush()
			<-stall
		})
	})
	t.Cleanup(func() { close(stall) }) // before the server's Shutdown, which waits for handlers
	start := time.Now()
	rep, err := Run(context.Background(), Options{
		Targets: []string{url}, Stream: true, Requests: 2, Concurrency: 2, Timeout: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if r := rep.Targets[0].Rounds[0]; r.Errors[ErrTimeout] != 2 || r.Events != 2 {
		t.Errorf("errors = %v, events = %d; want 2 timeouts after 1 event each", r.Errors, r.Events)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("a stalled stream held the run for %v; the request timeout should end it", el)
	}
}
