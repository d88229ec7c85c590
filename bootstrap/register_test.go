package bootstrap

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"pdlb"
	"pdlb/config"
	"pdlb/proxy/proxytest"
)

// scriptedServer answers PUT /route with the given statuses in turn (the
// last one repeats) and records the bodies.
type scriptedServer struct {
	url    string
	puts   atomic.Int32
	mu     sync.Mutex
	bodies [][]byte
}

func startScripted(t *testing.T, statuses ...int) *scriptedServer {
	t.Helper()
	s := &scriptedServer{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		n := int(s.puts.Add(1)) - 1
		s.mu.Lock()
		s.bodies = append(s.bodies, append([]byte(nil), ctx.PostBody()...))
		s.mu.Unlock()
		ctx.SetStatusCode(statuses[min(n, len(statuses)-1)])
	}}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	s.url = "http://" + ln.Addr().String()
	return s
}

// sleepRecorder is an injected Sleep that returns at once.
type sleepRecorder struct {
	mu     sync.Mutex
	delays []time.Duration
	hook   func(n int) // called with the 1-based sleep count
}

func (r *sleepRecorder) Sleep(ctx context.Context, d time.Duration) error {
	r.mu.Lock()
	r.delays = append(r.delays, d)
	n := len(r.delays)
	r.mu.Unlock()
	if r.hook != nil {
		r.hook(n)
	}
	return ctx.Err()
}

func testPayload() RankRegistration {
	page, dtype, port := 64, "auto", 30000
	return RankRegistration{AttnTPSize: 1, AttnCPSize: 1, AttnDPSize: 1, PPSize: 1, SystemDPSize: 1,
		RankIP: "10.0.0.1", RankPort: 17000, PageSize: &page, KVCacheDtype: &dtype, PrefillHTTPPort: &port}
}

func TestRegistrarFirstTry(t *testing.T) {
	s := startScripted(t, 200)
	var sl sleepRecorder
	r := NewRegistrar(RegistrarOptions{URL: s.url, Sleep: sl.Sleep, Jitter: func() float64 { return 0.75 }})
	if err := r.Register(context.Background(), testPayload()); err != nil {
		t.Fatal(err)
	}
	if s.puts.Load() != 1 || len(sl.delays) != 0 {
		t.Fatalf("puts=%d sleeps=%d, want 1/0", s.puts.Load(), len(sl.delays))
	}
	// §8: 15 keys asserted by SGLang's test plus the two optional ones.
	var m map[string]any
	if err := json.Unmarshal(s.bodies[0], &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"attn_tp_size", "attn_tp_rank", "attn_cp_size", "attn_cp_rank", "attn_dp_size", "attn_dp_rank",
		"pp_size", "pp_rank", "system_dp_size", "system_dp_rank", "rank_ip", "rank_port", "page_size", "kv_cache_dtype",
		"enable_dsa_cache_layer_split", "prefill_http_port"} {
		if _, ok := m[k]; !ok {
			t.Errorf("payload lacks %q", k)
		}
	}
	if m["prefill_http_port"] != float64(30000) {
		t.Errorf("prefill_http_port = %v", m["prefill_http_port"])
	}
}

func TestRegistrarRetriesUntil200(t *testing.T) {
	s := startScripted(t, 503, 503, 200)
	var sl sleepRecorder
	r := NewRegistrar(RegistrarOptions{URL: s.url, Sleep: sl.Sleep, Jitter: func() float64 { return 0.75 }})
	if err := r.Register(context.Background(), testPayload()); err != nil {
		t.Fatal(err)
	}
	if s.puts.Load() != 3 || len(sl.delays) != 2 {
		t.Fatalf("puts=%d sleeps=%d, want 3/2", s.puts.Load(), len(sl.delays))
	}
}

func TestRegistrarAllFailDelays(t *testing.T) {
	for _, c := range []struct {
		j    float64
		want []time.Duration
	}{
		{0.75, []time.Duration{750 * time.Millisecond, 1500 * time.Millisecond, 3 * time.Second, 6 * time.Second}},
		{1.0, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}},
	} {
		s := startScripted(t, 500, 404, 503, 201, 500) // 201 is not 200: still a failure
		var sl sleepRecorder
		var logs bytes.Buffer
		r := NewRegistrar(RegistrarOptions{URL: s.url, Sleep: sl.Sleep, Jitter: func() float64 { return c.j },
			Logger: zerolog.New(&logs), FailFast: true})
		err := r.Register(context.Background(), testPayload())
		if !errors.Is(err, ErrRegistrationFailed) {
			t.Fatalf("err = %v, want ErrRegistrationFailed", err)
		}
		if s.puts.Load() != 5 {
			t.Fatalf("puts = %d, want 5", s.puts.Load())
		}
		if len(sl.delays) != 4 {
			t.Fatalf("sleeps = %v, want 4", sl.delays)
		}
		for i, d := range sl.delays {
			if d != c.want[i] {
				t.Fatalf("j=%v delays %v, want %v", c.j, sl.delays, c.want)
			}
		}
		out := logs.String()
		mustContain(t, "logs", out, "Prefill register attempt 1/5 failed: status 500", "attempt 4/5 failed: status 201",
			`"level":"error"`, "Prefill instance failed to register to bootstrap server after 5 retries")
		if n := strings.Count(out, `"level":"warn"`); n != 5 {
			t.Fatalf("%d warn lines, want 5", n)
		}
	}
}

func TestRegistrarDelayCap(t *testing.T) {
	r := NewRegistrar(RegistrarOptions{URL: "http://x", Jitter: func() float64 { return 1.0 }})
	if d := r.Delay(10); d != 30*time.Second {
		t.Fatalf("Delay(10) = %v, want 30s cap", d)
	}
	r = NewRegistrar(RegistrarOptions{URL: "http://x", Jitter: func() float64 { return 0.1 }})
	if d := r.Delay(0); d != 750*time.Millisecond {
		t.Fatalf("jitter below 0.75 not clamped: %v", d)
	}
}

// The registration-retry seed scenario: the prefill starts before the
// registry; the registry (a real pdlb Registry) comes up during the second
// backoff and the third attempt registers.
func TestRegistrarPrefillBeforeRegistry(t *testing.T) {
	addr := proxytest.ClosedAddr(t)
	reg := NewRegistry(defaulted(config.Bootstrap{}), zerolog.Nop(), pdlb.Clock{})
	_, portStr, _ := net.SplitHostPort(addr)
	port, _ := pyInt(portStr)
	srv := reg.NewServer(int(port))
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	var logs bytes.Buffer
	sl := sleepRecorder{hook: func(n int) {
		if n == 2 {
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				t.Errorf("listen: %v", err)
				return
			}
			go func() { _ = srv.Serve(ln) }()
		}
	}}
	r := NewRegistrar(RegistrarOptions{URL: "http://" + addr, Sleep: sl.Sleep, Jitter: func() float64 { return 0.75 }, Logger: zerolog.New(&logs)})
	if err := r.Register(context.Background(), testPayload()); err != nil {
		t.Fatal(err)
	}
	if len(sl.delays) != 2 {
		t.Fatalf("sleeps = %v, want 2", sl.delays)
	}
	if !reg.Ready(addr) {
		t.Fatal("registry not ready after registration")
	}
	out := logs.String()
	mustContain(t, "root cause", out, "Prefill register attempt 1/5 failed: connection refused")
	if strings.Contains(out, "error when dialing") {
		t.Fatalf("log shows the wrapper, not the root cause: %s", out)
	}
}

func TestRegistrarNoFailFastKeepsRunning(t *testing.T) {
	var sl sleepRecorder
	var logs bytes.Buffer
	r := NewRegistrar(RegistrarOptions{URL: "http://" + proxytest.ClosedAddr(t), Sleep: sl.Sleep, Logger: zerolog.New(&logs)})
	if err := r.Register(context.Background(), testPayload()); err != nil {
		t.Fatalf("FailFast=false must return nil, got %v", err)
	}
	if len(sl.delays) != 4 {
		t.Fatalf("sleeps = %d, want 4", len(sl.delays))
	}
	mustContain(t, "logs", logs.String(), "failed to register", "connection refused")
}

func TestRegistrarContextCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	sl := sleepRecorder{hook: func(int) { cancel() }}
	r := NewRegistrar(RegistrarOptions{URL: "http://" + proxytest.ClosedAddr(t), Sleep: sl.Sleep})
	if err := r.Register(ctx, testPayload()); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestRegistrarSendsToken(t *testing.T) {
	e := startRegistry(t, config.Bootstrap{AuthToken: "tok"})
	var sl sleepRecorder
	bad := NewRegistrar(RegistrarOptions{URL: e.base, Sleep: sl.Sleep, Attempts: 1, FailFast: true})
	if err := bad.Register(context.Background(), testPayload()); !errors.Is(err, ErrRegistrationFailed) || !strings.Contains(err.Error(), "status 401") {
		t.Fatalf("without token: %v", err)
	}
	good := NewRegistrar(RegistrarOptions{URL: e.base + "/route", Sleep: sl.Sleep, Token: "tok", FailFast: true})
	if err := good.Register(context.Background(), testPayload()); err != nil {
		t.Fatal(err)
	}
	if !e.reg.Ready(e.addr) {
		t.Fatal("not ready")
	}
}

func TestRootCause(t *testing.T) {
	inner := errors.New("connection refused")
	err := &msgError{"outer", &msgError{"middle", inner}}
	if rootCause(err) != inner {
		t.Fatal("rootCause did not reach the innermost error")
	}
	if rootCause(errors.Join(inner, errors.New("x"))) != inner {
		t.Fatal("rootCause through errors.Join")
	}
}
