package proxy

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"pdlb/config"
	"pdlb/proxy/proxytest"
)

// BenchmarkFanout measures one non-streamed attempt end to end (both legs
// on loopback keep-alive connections to engines that answer at once): one
// op is one request, so allocs/op shows what the fan-out allocates per
// request and ns/op is dominated by the loopback round trips. "observed"
// adds a LegObserver (counting only: router's BenchmarkLegMetrics holds
// the cost of the real one).
func BenchmarkFanout(b *testing.B) {
	b.Run("plain", func(b *testing.B) { benchmarkFanout(b, nil) })
	b.Run("observed", func(b *testing.B) { benchmarkFanout(b, new(countingObserver)) })
}

type countingObserver struct{ answered, done atomic.Uint64 }

func (o *countingObserver) LegAnswered(*Backend, time.Duration) { o.answered.Add(1) }
func (o *countingObserver) LegDone(*Backend, *UpstreamError)    { o.done.Add(1) }

func benchmarkFanout(b *testing.B, obs LegObserver) {
	answer := proxytest.JSONAnswer(200, `{"text":"ok","meta_info":{}}`)
	p := mustBackend(b, proxytest.NewEngine(b, answer).URL, Prefill)
	d := mustBackend(b, proxytest.NewEngine(b, answer).URL, Decode)
	for _, be := range []*Backend{p, d} {
		be.SetBreaker(NewBreaker(be.Role.String()+" "+be.URL, config.Default().Breaker, zerolog.Nop(), nil))
	}
	px := New(testTimeouts(), zerolog.Nop())
	if obs != nil {
		px.SetObserver(obs)
	}
	body := []byte(prefillBody)
	run := func() {
		pt, _ := p.Acquire()
		dt, _ := d.Acquire()
		x := Exchange{Prefill: pt, Decode: dt, Path: "/generate", PrefillBody: body, DecodeBody: body,
			RequestID: "req-7", Deadline: time.Now().Add(time.Hour)}
		ans, err := px.Do(&x)
		if err != nil {
			b.Fatal(err)
		}
		ans.Release()
	}
	run() // dial both keep-alive connections
	b.ReportAllocs()
	for b.Loop() {
		run()
	}
	proxytest.WaitFor(time.Second, func() bool { return p.InFlight() == 0 })
}
