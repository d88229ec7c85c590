package policy

import (
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"pdlb/config"
	"pdlb/proxy"
	"pdlb/proxy/proxytest"
)

func TestPowerOfTwo(t *testing.T) {
	bs := backends(t, 4)
	withInFlight(t, bs[0], 5)
	withInFlight(t, bs[1], 1)
	withInFlight(t, bs[3], 9)
	p := newPowerOfTwo(proxy.Decode, config.PowerOfTwo{})

	// Of two, the one with fewer in flight always wins.
	for range 200 {
		if b, why := p.Pick(Request{}, bs, only(bs[0], bs[3])); b != bs[0] || why != (Reason{"decode_load", 5}) {
			t.Fatalf("picked %v (%v), want the less loaded backend 0", b, why)
		}
	}
	// Over all four, the most loaded is never picked (it loses every draw
	// it is in) and the least loaded (bs[2], 0 in flight) most often: it
	// wins every draw it is in, half of all draws.
	got := counts(p, bs, all, 3000)
	if got[bs[3]] != 0 {
		t.Fatalf("the most loaded backend was picked %d times", got[bs[3]])
	}
	if n := got[bs[2]]; n < 1300 || n > 1700 {
		t.Fatalf("the least loaded backend won %d of 3000 draws, want about 1500", n)
	}
	// One acceptable backend is picked whatever its load; none, nothing.
	if b, _ := p.Pick(Request{}, bs, only(bs[3])); b != bs[3] {
		t.Fatal("the only acceptable backend was not picked")
	}
	if b, _ := p.Pick(Request{}, bs, only()); b != nil {
		t.Fatal("picked with nothing acceptable")
	}
}

// TestPowerOfTwoEngineLoad: with engine_load, a backend whose engine
// reports more requests than pdlb sent it (another balancer's) loses to
// one with fewer; without it, only pdlb's count is compared.
func TestPowerOfTwoEngineLoad(t *testing.T) {
	e := proxytest.NewEngine(t, func(ctx *fasthttp.RequestCtx) {
		proxytest.JSONAnswer(200, `{"aggregate":{"total_running_reqs":7,"total_waiting_reqs":3}}`)(ctx)
	})
	busy, err := proxy.NewBackend(e.URL, proxy.Decode, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	other := backends(t, 1)[0]
	withInFlight(t, other, 2)
	pool := proxy.NewPool(nil)
	pool.Add(busy)
	pool.Add(other)
	h := proxy.NewHealthChecker(pool, config.Health{Interval: time.Hour, Timeout: time.Second, FailThreshold: 1, PassThreshold: 1}, zerolog.Nop())
	h.EngineLoads = true
	h.CheckOnce() // other has no engine: it fails its check, and its engine load stays unknown
	if busy.EngineLoad() != 10 || other.EngineLoad() != -1 {
		t.Fatalf("engine loads %d and %d, want 10 and unknown", busy.EngineLoad(), other.EngineLoad())
	}
	cands := []*proxy.Backend{busy, other}
	withEngine := newPowerOfTwo(proxy.Decode, config.PowerOfTwo{EngineLoad: true})
	if b, why := withEngine.Pick(Request{}, cands, all); b != other || why.Value != 2 {
		t.Fatalf("with engine load picked %s (%v), want the one with 2 in flight", b.URL, why)
	}
	if b, _ := newPowerOfTwo(proxy.Decode, config.PowerOfTwo{}).Pick(Request{}, cands, all); b != busy {
		t.Fatalf("without engine load picked %s, want the one pdlb sent nothing", b.URL)
	}
}

func TestNewByName(t *testing.T) {
	for _, name := range []string{"random", "round_robin", "power_of_two"} {
		if p, err := New(name, proxy.Prefill, config.Default().Policy); err != nil || p == nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := New("least_loaded", proxy.Prefill, config.Default().Policy); err == nil {
		t.Error("an unknown policy was built")
	}
}
