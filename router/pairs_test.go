package router

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"pdlb"
	"pdlb/config"
	"pdlb/proxy"
	"pdlb/proxy/proxytest"
	"pdlb/router/policy"
)

// kvFailure is the 500 SGLang's decode answers when a request's KV never
// came from its prefill (disaggregation/decode.py).
const kvFailure = `{"error":{"message":"Decode transfer failed for request rank=0 decode_req.req.rid='r1' ` +
	`decode_req.req.bootstrap_room=7 with exception KVTransferError(bootstrap_room=7): Failed to get kvcache from prefill instance, it might be dead"}}`

// pairCounts counts what each engine saw, by the prefill's bootstrap port
// in the body (each prefill has its own).
type pairCounts struct {
	mu sync.Mutex
	n  map[string]int // "engine/port" → requests
}

func (c *pairCounts) add(engine string, body []byte) string {
	port := "?"
	for _, p := range []string{"1111", "2222"} {
		if bytes.Contains(body, []byte(`"bootstrap_port":`+p)) {
			port = p
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[engine+"/"+port]++
	return port
}

func (c *pairCounts) get(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[key]
}

// TestPairHealth: decode X cannot get KV from prefill A (every A–X request
// fails with SGLang's KV-transfer 500) while A and X serve their other
// pairs. After breaker.pair_failures such failures the pair is avoided for
// the cool-down: every client request succeeds (a pair fault is retried on
// another pair), A keeps serving with Y and X with B, X's breaker (which
// would open on one counted failure) stays closed, GET /workers' source
// and the metrics show the pair; after the cool-down the pair is tried
// again and avoided again.
func TestPairHealth(t *testing.T) {
	counts := &pairCounts{n: map[string]int{}}
	engine := func(name string, fail func(port string) bool) *proxytest.Engine {
		return proxytest.NewEngine(t, func(ctx *fasthttp.RequestCtx) {
			if !ctx.IsPost() {
				proxytest.JSONAnswer(200, `{}`)(ctx)
				return
			}
			port := counts.add(name, ctx.PostBody())
			if fail(port) {
				proxytest.JSONAnswer(500, kvFailure)(ctx)
				return
			}
			proxytest.JSONAnswer(200, `{"text":"ok"}`)(ctx)
		})
	}
	never := func(string) bool { return false }
	a, b := engine("A", never), engine("B", never)
	x := engine("X", func(port string) bool { return port == "1111" })
	y := engine("Y", never)

	// The real time (the legs' deadlines come from it too) plus what the
	// test skips ahead.
	var skipped atomic.Int64
	clock := pdlb.Clock{Now: func() time.Time { return time.Now().Add(time.Duration(skipped.Load())) }}
	portA, portB := 1111, 2222
	l := startLBWith(t, []*proxytest.Engine{a, b}, []*proxytest.Engine{x, y}, testLog(t), clock, func(c *config.Config) {
		c.Prefill[0].BootstrapPort, c.Prefill[1].BootstrapPort = &portA, &portB
		c.Breaker = config.Default().Breaker
		c.Breaker.ConsecutiveFailures = 1 // one counted failure would open X's breaker
		c.Breaker.PairFailures, c.Breaker.PairWindow, c.Breaker.PairCooldown = 3, time.Minute, time.Minute
		c.Retry.MaxAttempts, c.Retry.Initial, c.Retry.Max = 3, time.Millisecond, time.Millisecond
	})
	send := func(n int) {
		t.Helper()
		for i := range n {
			resp, err := http.Post(l.URL+"/generate", "application/json", strings.NewReader(`{"text":"hi"}`))
			resp, body := proxytest.ReadAll(t, resp, err)
			if resp.StatusCode != 200 {
				t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
			}
		}
	}
	xBreaker := func() string {
		for _, d := range l.pool.Backends(proxy.Decode) {
			if d.URL == x.URL {
				return d.Breaker().State().String()
			}
		}
		return "gone"
	}
	scrape := func() string {
		var out bytes.Buffer
		l.router.metrics.WritePrometheus(&out)
		return out.String()
	}
	failuresLine := fmt.Sprintf(`pdlb_pair_failures_total{prefill=%q,decode=%q} `, a.URL, x.URL)

	// 80 requests choose A–X (1 in 4 at random) far more than 3 times.
	send(80)
	if got := counts.get("X/1111"); got != 3 {
		t.Errorf("X failed %d requests from A, want 3 (then the pair is avoided)", got)
	}
	avoided := l.router.AvoidedPairs()
	if len(avoided) != 1 || avoided[0].Pair != (Pair{a.URL, x.URL}) || avoided[0].Until.Sub(clock.Now()) > time.Minute {
		t.Errorf("avoided pairs %+v, want A–X for at most a minute", avoided)
	}
	if s := xBreaker(); s != "closed" {
		t.Errorf("X's breaker is %s: pair faults counted against the decode", s)
	}
	m := scrape()
	for _, line := range []string{"pdlb_pairs_avoided 1\n", failuresLine + "3\n"} {
		if !strings.Contains(m, line) {
			t.Errorf("metrics lack %q", line)
		}
	}

	// Avoided, both engines keep serving their other pairs.
	aWithY, xWithB := counts.get("Y/1111"), counts.get("X/2222")
	send(40)
	if counts.get("X/1111") != 3 {
		t.Errorf("the avoided pair was chosen again during its cool-down")
	}
	if counts.get("Y/1111") == aWithY || counts.get("X/2222") == xWithB {
		t.Errorf("A with Y %d→%d, X with B %d→%d: an engine of the avoided pair stopped serving",
			aWithY, counts.get("Y/1111"), xWithB, counts.get("X/2222"))
	}

	// After the cool-down the pair is tried again, and avoided again after
	// three more failures.
	skipped.Add(int64(time.Minute + time.Second))
	if got := l.router.AvoidedPairs(); len(got) != 0 {
		t.Errorf("after the cool-down the avoided pairs are %+v", got)
	}
	if m := scrape(); !strings.Contains(m, "pdlb_pairs_avoided 0\n") {
		t.Error("metrics still show an avoided pair after the cool-down")
	}
	send(80)
	if got := counts.get("X/1111"); got != 6 {
		t.Errorf("after the cool-down X failed %d requests from A in all, want 6", got)
	}
	if len(l.router.AvoidedPairs()) != 1 {
		t.Errorf("the pair is not avoided again: %+v", l.router.AvoidedPairs())
	}
	if !strings.Contains(scrape(), failuresLine+"6\n") {
		t.Errorf("metrics do not count 6 failures of A–X")
	}
}

// TestPairHealthOff: breaker.pair_failures 0 never avoids a pair (each
// A–X request still retries on another pair).
func TestPairHealthOff(t *testing.T) {
	var axFailures atomic.Int32
	a := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	x := proxytest.NewEngine(t, func(ctx *fasthttp.RequestCtx) {
		if ctx.IsPost() {
			axFailures.Add(1)
			proxytest.JSONAnswer(500, kvFailure)(ctx)
			return
		}
		proxytest.JSONAnswer(200, `{}`)(ctx)
	})
	l := startLB(t, []*proxytest.Engine{a}, []*proxytest.Engine{x}, func(c *config.Config) {
		c.Breaker.Enabled = false
		c.Breaker.PairFailures = 0
		c.Retry.MaxAttempts = 1
	})
	for range 10 {
		resp, err := http.Post(l.URL+"/generate", "application/json", strings.NewReader(`{"text":"hi"}`))
		if resp, _ := proxytest.ReadAll(t, resp, err); resp.StatusCode != 502 {
			t.Fatalf("status %d, want 502 (the decode's 500)", resp.StatusCode)
		}
	}
	if axFailures.Load() != 10 || len(l.router.AvoidedPairs()) != 0 {
		t.Errorf("%d requests reached X, avoided %+v; want 10 and none", axFailures.Load(), l.router.AvoidedPairs())
	}
}

// TestOnlyAvoidedPairLeft: with one prefill and one decode whose pairing
// is avoided, requests still go to them (an avoided pair beats a 503).
func TestOnlyAvoidedPairLeft(t *testing.T) {
	var fail atomic.Bool
	fail.Store(true)
	var reached atomic.Int32
	a := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	x := proxytest.NewEngine(t, func(ctx *fasthttp.RequestCtx) {
		if ctx.IsPost() {
			reached.Add(1)
			if fail.Load() {
				proxytest.JSONAnswer(500, kvFailure)(ctx)
				return
			}
		}
		proxytest.JSONAnswer(200, `{"text":"ok"}`)(ctx)
	})
	l := startLB(t, []*proxytest.Engine{a}, []*proxytest.Engine{x}, func(c *config.Config) {
		c.Breaker.PairFailures, c.Breaker.PairWindow, c.Breaker.PairCooldown = 1, time.Minute, time.Hour
		c.Retry.MaxAttempts = 1
	})
	post := func() int {
		resp, err := http.Post(l.URL+"/generate", "application/json", strings.NewReader(`{"text":"hi"}`))
		resp, _ = proxytest.ReadAll(t, resp, err)
		return resp.StatusCode
	}
	if st := post(); st != 502 {
		t.Fatalf("first request: %d, want 502", st)
	}
	if len(l.router.AvoidedPairs()) != 1 {
		t.Fatalf("the pair is not avoided after one failure (pair_failures 1)")
	}
	fail.Store(false)
	if st := post(); st != 200 || reached.Load() != 2 {
		t.Errorf("with only the avoided pair left: status %d, decode reached %d times; want 200, 2", st, reached.Load())
	}
}

// TestPairFailuresCountWithinTheWindow: failures older than pair_window do
// not count; a failure of another pair counts for that pair only; turning
// pair health off by reload ends an avoidance.
func TestPairFailuresCountWithinTheWindow(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	h := newPairHealth(PairRule{Failures: 3, Window: time.Minute, Cooldown: time.Minute}, func() time.Time { return now })
	fail := func(p, d string) bool { avoided, _ := h.failed(p, d); return avoided }
	for range 2 {
		if fail("a", "x") {
			t.Fatal("avoided before the third failure")
		}
	}
	now = now.Add(61 * time.Second) // both fall out of the window
	if fail("a", "x") || fail("b", "x") || fail("a", "y") || fail("a", "x") {
		t.Fatal("avoided with failures outside the window or of other pairs")
	}
	if !fail("a", "x") {
		t.Fatal("three failures within the window did not avoid the pair")
	}
	if h.snapshot(now) == nil || len(h.Avoided()) != 1 {
		t.Fatalf("avoided %+v", h.Avoided())
	}
	h.setRule(PairRule{})
	if h.snapshot(now) != nil || len(h.Avoided()) != 0 {
		t.Errorf("pair health turned off, still avoided: %+v", h.Avoided())
	}
	if got := h.Faults()[Pair{"a", "x"}]; got != 5 {
		t.Errorf("a–x faults %d, want 5", got)
	}
}

// BenchmarkPickPair: choosing a pair of 4 prefills and 4 decodes (random
// policy) with no pair avoided (pair health's cost: one atomic load), and
// with one pair avoided (the avoided set is consulted per candidate).
func BenchmarkPickPair(b *testing.B) {
	engines := func(n int) []*proxytest.Engine {
		var es []*proxytest.Engine
		for range n {
			es = append(es, proxytest.NewEngine(b, proxytest.JSONAnswer(200, `{}`)))
		}
		return es
	}
	l := startLBFull(b, engines(4), engines(4), Options{Log: zerolog.Nop()})
	r := l.router
	for _, avoided := range []bool{false, true} {
		if avoided {
			ps, ds := l.pool.Backends(proxy.Prefill), l.pool.Backends(proxy.Decode)
			r.pairs.setRule(PairRule{Failures: 1, Window: time.Minute, Cooldown: time.Hour})
			r.pairs.failed(ps[0].URL, ds[0].URL)
		}
		b.Run(fmt.Sprintf("avoided=%v", avoided), func(b *testing.B) {
			b.ReportAllocs()
			q := &request{r: r}
			for b.Loop() {
				pt, dt, msg := r.pickPair(q, nil)
				if msg != "" {
					b.Fatal(msg)
				}
				pt.Release()
				dt.Release()
			}
		})
	}
}

// TestDecodeTimeoutAfterPrefillCountsForThePair: a decode stream that sends
// nothing before timeouts.decode_first_byte although its prefill answered
// waited for KV that did not come: counted against the pair (and, as any
// timeout, the decode's breaker). The same timeout while the prefill had not
// answered, or on a non-stream request (whose first byte is the whole
// generation), is not.
func TestDecodeTimeoutAfterPrefillCountsForThePair(t *testing.T) {
	// silent never answers a request until released.
	silent := func(released <-chan struct{}) fasthttp.RequestHandler {
		return func(ctx *fasthttp.RequestCtx) {
			if ctx.IsPost() {
				<-released
			}
			proxytest.JSONAnswer(200, `{}`)(ctx)
		}
	}
	cases := []struct {
		name    string
		prefill func(released <-chan struct{}) fasthttp.RequestHandler
		body    string
		counted bool
		// unreached: the decode accepts connections and never answers the
		// TLS handshake, so the request never reaches it.
		unreached bool
	}{
		{"stream, prefill answered", func(<-chan struct{}) fasthttp.RequestHandler { return sseEngine([]string{`{"p":1}`}, 0, false) },
			`{"text":"hi","stream":true}`, true, false},
		{"stream, prefill silent too", silent, `{"text":"hi","stream":true}`, false, false},
		{"non-stream, prefill answered", func(<-chan struct{}) fasthttp.RequestHandler { return proxytest.JSONAnswer(200, `{}`) },
			`{"text":"hi"}`, false, false},
		{"stream, prefill answered, decode never reached", func(<-chan struct{}) fasthttp.RequestHandler { return sseEngine([]string{`{"p":1}`}, 0, false) },
			`{"text":"hi","stream":true}`, false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			released := make(chan struct{})
			p := proxytest.NewEngine(t, tc.prefill(released))
			d := proxytest.NewEngine(t, silent(released))
			if tc.unreached {
				ln := proxytest.Listen(t, "127.0.0.1:0")
				go func() {
					var held []net.Conn // never read, never written
					for {
						c, err := ln.Accept()
						if err != nil {
							for _, c := range held {
								c.Close()
							}
							return
						}
						held = append(held, c)
					}
				}()
				t.Cleanup(func() { ln.Close() })
				d = &proxytest.Engine{URL: "https://" + ln.Addr().String()}
			}
			t.Cleanup(func() { close(released) }) // runs before the engines' shutdown
			l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d}, func(c *config.Config) {
				c.Timeouts.DecodeFirstByte, c.Timeouts.PrefillFirstByte = 300*time.Millisecond, 2*time.Second
				c.Breaker.PairFailures, c.Breaker.PairWindow, c.Breaker.PairCooldown = 1, time.Minute, time.Hour
				c.Retry.MaxAttempts = 1
			})
			resp, err := http.Post(l.URL+"/generate", "application/json", strings.NewReader(tc.body))
			resp, body := proxytest.ReadAll(t, resp, err)
			if resp.StatusCode != 504 {
				t.Fatalf("status %d %s, want 504 (the decode timed out)", resp.StatusCode, body)
			}
			if got := len(l.router.AvoidedPairs()) == 1; got != tc.counted {
				t.Errorf("pair avoided %v, want %v", got, tc.counted)
			}
		})
	}
}

// TestAvoidedPairTeachesThePolicyNothing: a prefill offered and then given
// up because its only decode is avoided with it must not be recorded by
// cache_aware as holding the prompt (it never saw it); the prefill that
// served it is.
func TestAvoidedPairTeachesThePolicyNothing(t *testing.T) {
	a := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	b := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	x := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{"text":"ok"}`))
	l := startLB(t, []*proxytest.Engine{a, b}, []*proxytest.Engine{x}, func(c *config.Config) {
		c.Policy = config.Default().Policy
		c.Policy.Prefill = "cache_aware"
	})
	r := l.router
	r.pairs.setRule(PairRule{Failures: 1, Window: time.Minute, Cooldown: time.Hour})
	r.pairs.failed(a.URL, x.URL)
	// B busy, so cache_aware offers the new prompt to A first.
	busy, _ := l.pool.Find(b.URL).Acquire()
	defer busy.Release()
	prompt := strings.Repeat("a prompt that A never sees ", 40)
	if resp, body := proxytest.Post(t, l.URL+"/generate", `{"text":"`+prompt+`"}`); resp.StatusCode != 200 || a.Count() != 0 || b.Count() != 1 {
		t.Fatalf("%d %s; A got %d, B %d requests, want B only", resp.StatusCode, body, a.Count(), b.Count())
	}
	pol := r.policies.Load().prefill
	match := func(e *proxytest.Engine) float64 {
		be := l.pool.Find(e.URL)
		_, why := pol.Pick(policy.Request{Prompt: []byte(`"` + prompt + `"`)}, []*proxy.Backend{be}, func(*proxy.Backend) bool { return true })
		return why.Value
	}
	if ma, mb := match(a), match(b); ma != 0 || mb < 0.9 {
		t.Errorf("cache_aware holds the prompt at A %.2f, at B %.2f; want 0 and about 1", ma, mb)
	}
}
