package proxy

import (
	"crypto/tls"
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
//
// "tls" is "plain" with both engines at https:// (ECDSA P-256, TLS 1.3,
// keep-alive: the handshake is paid once), "tls-reconnect" dials and
// shakes hands for every leg (what an engine that closes its keep-alive
// connections costs: TLS 1.3 resumption, no certificate check).
// "api-key" is "plain" with upstream_auth.api_key set (one more header
// line per leg).
func BenchmarkFanout(b *testing.B) {
	b.Run("plain", func(b *testing.B) { benchmarkFanout(b, nil, nil, false, nil) })
	b.Run("observed", func(b *testing.B) { benchmarkFanout(b, new(countingObserver), nil, false, nil) })
	b.Run("tls", func(b *testing.B) { benchmarkFanout(b, nil, benchPKI(b), false, nil) })
	b.Run("tls-reconnect", func(b *testing.B) { benchmarkFanout(b, nil, benchPKI(b), true, nil) })
	b.Run("api-key", func(b *testing.B) {
		benchmarkFanout(b, nil, nil, false, NewEngineAuth(config.UpstreamAuth{APIKey: "sk-0123456789abcdef0123456789abcdef"}))
	})
}

// fanoutTLS is the engines' certificate and pdlb's upstream TLS trusting it.
type fanoutTLS struct {
	engine *tls.Config
	up     *UpstreamTLS
}

func benchPKI(b *testing.B) *fanoutTLS {
	ca := proxytest.NewCA(b, "bench CA")
	up, err := NewUpstreamTLS(config.UpstreamTLS{CAFile: ca.WriteCA(b, b.TempDir(), "ca")})
	if err != nil {
		b.Fatal(err)
	}
	return &fanoutTLS{engine: ca.Issue(b, "engine", proxytest.CertOptions{}).ServerConfig(nil), up: up}
}

type countingObserver struct{ answered, done atomic.Uint64 }

func (o *countingObserver) LegAnswered(*Backend, time.Duration) { o.answered.Add(1) }
func (o *countingObserver) LegDone(*Backend, *UpstreamError)    { o.done.Add(1) }

func benchmarkFanout(b *testing.B, obs LegObserver, secure *fanoutTLS, reconnect bool, auth *EngineAuth) {
	answer := proxytest.JSONAnswer(200, `{"text":"ok","meta_info":{}}`)
	var p, d *Backend
	if secure == nil {
		p = mustBackend(b, proxytest.NewEngine(b, answer).URL, Prefill)
		d = mustBackend(b, proxytest.NewEngine(b, answer).URL, Decode)
	} else {
		p = mustTLSBackend(b, proxytest.NewTLSEngine(b, secure.engine, answer).URL, Prefill, secure.up)
		d = mustTLSBackend(b, proxytest.NewTLSEngine(b, secure.engine, answer).URL, Decode, secure.up)
	}
	for _, be := range []*Backend{p, d} {
		be.UseAuth(auth)
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
		if reconnect {
			p.Close()
			d.Close()
		}
	}
	run() // dial both keep-alive connections
	b.ReportAllocs()
	stop := proxytest.ReportCPU(b)
	for b.Loop() {
		run()
	}
	stop()
	proxytest.WaitFor(time.Second, func() bool { return p.InFlight() == 0 })
}

func mustTLSBackend(t testing.TB, url string, role Role, up *UpstreamTLS) *Backend {
	t.Helper()
	b, err := NewBackendTLS(url, role, time.Second, up)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}
