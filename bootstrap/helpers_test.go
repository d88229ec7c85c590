package bootstrap

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"pdlb"
	"pdlb/config"
	"pdlb/proxy/proxytest"
)

// fakeClock is a settable clock for expiry tests.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// regEnv is a Registry served on a real loopback listener (or, from
// startRegistryInMemory, on an in-memory one).
type regEnv struct {
	reg    *Registry
	port   int
	base   string // http://127.0.0.1:port
	addr   string // 127.0.0.1:port
	client *fasthttp.Client
	clock  *fakeClock
	mem    *fasthttputil.InmemoryListener // nil on TCP
}

func startRegistry(t *testing.T, cfg config.Bootstrap) *regEnv {
	t.Helper()
	return startRegistryOn(t, cfg, proxytest.Listen(t, "127.0.0.1:0"))
}

// startRegistryOn serves a registry namespace on ln (its port).
func startRegistryOn(t *testing.T, cfg config.Bootstrap, ln net.Listener) *regEnv {
	t.Helper()
	e := serveRegistry(t, cfg, ln, ln.Addr().(*net.TCPAddr).Port, ln.Addr().String())
	e.client = &fasthttp.Client{DialDualStack: true}
	return e
}

// startRegistryInMemory serves the registry on an in-memory listener. Its
// server side sees whatever peer address from asks for, so tests can send
// from hosts no loopback interface has (192.0.2.7, ::ffff:10.0.0.5).
func startRegistryInMemory(t *testing.T, cfg config.Bootstrap) *regEnv {
	t.Helper()
	ln := fasthttputil.NewInmemoryListener()
	port := config.DefaultBootstrapPort
	e := serveRegistry(t, cfg, ln, port, fmt.Sprintf("127.0.0.1:%d", port))
	e.mem = ln
	e.client = &fasthttp.Client{Dial: func(string) (net.Conn, error) { return ln.Dial() }}
	return e
}

func serveRegistry(t *testing.T, cfg config.Bootstrap, ln net.Listener, port int, addr string) *regEnv {
	t.Helper()
	return serveRegistryLogged(t, cfg, ln, port, addr, zerolog.Nop())
}

// startRegistryLogged is startRegistry with the registry logging to log.
func startRegistryLogged(t *testing.T, cfg config.Bootstrap, log zerolog.Logger) *regEnv {
	t.Helper()
	ln := proxytest.Listen(t, "127.0.0.1:0")
	e := serveRegistryLogged(t, cfg, ln, ln.Addr().(*net.TCPAddr).Port, ln.Addr().String(), log)
	e.client = &fasthttp.Client{}
	return e
}

func serveRegistryLogged(t *testing.T, cfg config.Bootstrap, ln net.Listener, port int, addr string, log zerolog.Logger) *regEnv {
	t.Helper()
	clk := newFakeClock()
	reg := NewRegistry(defaulted(cfg), log, pdlb.Clock{Now: clk.Now})
	srv := reg.NewServer(port)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	})
	return &regEnv{reg: reg, port: port, base: "http://" + addr, addr: addr, clock: clk}
}

// from returns e with a client whose connections come from ip. On TCP the
// client binds ip locally: Linux routes all of 127.0.0.0/8 to lo, so
// 127.0.0.2 is a second peer on the same machine (skipped where it is not
// a local address). In memory, ip is simply what the server is told.
func (e *regEnv) from(t *testing.T, ip string) *regEnv {
	t.Helper()
	local := &net.TCPAddr{IP: net.ParseIP(ip)}
	if local.IP == nil {
		t.Fatalf("from(%q): not an IP", ip)
	}
	c := *e
	if e.mem != nil {
		local.Port = 40000
		c.client = &fasthttp.Client{Dial: func(string) (net.Conn, error) { return e.mem.DialWithLocalAddr(local) }}
		return &c
	}
	probe, err := net.ListenTCP("tcp", local)
	if err != nil {
		t.Skipf("%s is not a local address here: %v", ip, err)
	}
	_ = probe.Close()
	d := &net.Dialer{LocalAddr: local, Timeout: 5 * time.Second}
	c.client = &fasthttp.Client{Dial: func(addr string) (net.Conn, error) { return d.Dial("tcp", addr) }}
	return &c
}

// defaulted fills the zero durations of cfg from config.Default(), as
// loading a config file does.
func defaulted(cfg config.Bootstrap) config.Bootstrap {
	d := config.Default().Bootstrap
	if cfg.DPRankTTL == 0 {
		cfg.DPRankTTL = d.DPRankTTL
	}
	if cfg.InfoWait == 0 {
		cfg.InfoWait = d.InfoWait
	}
	return cfg
}

type reply struct {
	status int
	ctype  string
	body   string
	retry  string
}

// do sends one request; hdr is alternating name, value.
func (e *regEnv) do(t *testing.T, method, pathQuery, body string, hdr ...string) reply {
	t.Helper()
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(e.base + pathQuery)
	req.Header.SetMethod(method)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	if body != "" {
		req.SetBodyString(body)
	}
	if err := e.client.DoTimeout(req, resp, 5*time.Second); err != nil {
		t.Fatalf("%s %s: %v", method, pathQuery, err)
	}
	return reply{resp.StatusCode(), string(resp.Header.ContentType()), string(resp.Body()), string(resp.Header.Peek("Retry-After"))}
}

// rankPUT renders a current-era payload; over overrides keys (nil deletes).
func rankPUT(tp, tpRank, dp, dpRank int, ip string, port int, over map[string]any) string {
	m := map[string]any{
		"attn_tp_size": tp, "attn_tp_rank": tpRank, "attn_cp_size": 1, "attn_cp_rank": 0,
		"attn_dp_size": dp, "attn_dp_rank": dpRank, "pp_size": 1, "pp_rank": 0,
		"system_dp_size": 1, "system_dp_rank": 0, "rank_ip": ip, "rank_port": port,
		"page_size": 64, "kv_cache_dtype": "auto", "load_balance_method": "follow_bootstrap_room",
		"enable_dsa_cache_layer_split": false, "prefill_http_port": 30000,
	}
	for k, v := range over {
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
	}
	b, _ := json.Marshal(m)
	return string(b)
}

const sentinelPath = "/route?" + SentinelQuery

func rankPath(dp, cp, tp, pp int) string {
	return fmt.Sprintf("/route?prefill_dp_rank=%d&prefill_cp_rank=%d&target_tp_rank=%d&target_pp_rank=%d", dp, cp, tp, pp)
}

func mustStatus(t *testing.T, what string, r reply, want int) {
	t.Helper()
	if r.status != want {
		t.Fatalf("%s: status %d, want %d (body %q)", what, r.status, want, r.body)
	}
}

func mustContain(t *testing.T, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Fatalf("%s: %q does not contain %q", what, s, sub)
		}
	}
}

// keysOf decodes a JSON object strictly into its key set.
func keysOf(t *testing.T, body string) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatalf("not a JSON object: %q: %v", body, err)
	}
	return m
}

func stringsReader(s string) *strings.Reader { return strings.NewReader(s) }
