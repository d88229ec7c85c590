package service

// The three seed scenarios of issue 3, end to end on loopback: a real pdlb
// Service with its embedded registry, real mock engines that register and
// look up through it (bench/mock), real HTTP between all of them.

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"

	"pdlb"
	"pdlb/bench/mock"
	"pdlb/bootstrap"
	"pdlb/config"
	"pdlb/proxy/proxytest"
)

// seedDeployment is pdlb (embedded registry) with one prefill and one decode
// mock. The decode serves at once; the prefill and pdlb start when the test
// says, so each scenario can order them.
type seedDeployment struct {
	t          *testing.T
	bootPort   int
	bootURL    string // the registry namespace of the prefill
	reserved   net.Listener
	prefill    *mock.Engine
	prefillLn  net.Listener
	prefillURL string
	decode     *mock.Engine
	decodeURL  string
	infoWait   time.Duration
	svc        *Service
	URL        string // pdlb's client-facing base URL
}

// newSeed builds the deployment. The prefill registers with pdlb's
// registry unless register is false; the decode always looks its prefill up.
func newSeed(t *testing.T, prefill, decode mock.Options, register bool) *seedDeployment {
	t.Helper()
	d := &seedDeployment{t: t, reserved: listen(t), infoWait: 2 * time.Second}
	// The registry port stays reserved (listening, never accepting) until
	// pdlb or the test releases it, so no other listener takes it meanwhile.
	d.bootPort = d.reserved.Addr().(*net.TCPAddr).Port
	t.Cleanup(d.releasePort)
	d.bootURL = "http://127.0.0.1:" + strconv.Itoa(d.bootPort)

	prefill.Role = mock.RolePrefill
	prefill.TokenDelay = -1
	if register {
		prefill.Bootstrap = d.bootURL
	}
	if prefill.RegisterBackoff == 0 {
		prefill.RegisterBackoff = 20 * time.Millisecond
	}
	d.prefill = mock.New(prefill, seedLog(t))
	d.prefillLn = listen(t)
	d.prefillURL = "http://" + d.prefillLn.Addr().String()
	t.Cleanup(func() { d.prefill.Shutdown() })

	decode.Role, decode.Lookup, decode.TokenDelay = mock.RoleDecode, true, -1
	if decode.LookupAttempts == 0 {
		decode.LookupAttempts, decode.LookupInterval = 5, 20*time.Millisecond
	}
	d.decode = mock.New(decode, seedLog(t))
	ln := listen(t)
	d.decodeURL = "http://" + ln.Addr().String()
	go d.decode.Serve(ln)
	t.Cleanup(func() { d.decode.Shutdown() })
	return d
}

// releasePort frees the registry port: connections to it are refused until
// pdlb listens there.
func (d *seedDeployment) releasePort() {
	if d.reserved != nil {
		d.reserved.Close()
		d.reserved = nil
	}
}

// servePrefill starts the prefill engine, and with it its registration.
func (d *seedDeployment) servePrefill() {
	go d.prefill.Serve(d.prefillLn)
}

// startPDLB starts pdlb with its registry on the prefill's bootstrap port.
func (d *seedDeployment) startPDLB() {
	t := d.t
	t.Helper()
	cfg := testConfig()
	cfg.Bootstrap = config.Bootstrap{
		Mode: "embedded", AdvertiseHost: "127.0.0.1", ListenHost: "127.0.0.1",
		InfoWait: d.infoWait, PollInterval: 20 * time.Millisecond,
		LookupAttempts: 5, LookupInterval: 20 * time.Millisecond,
	}
	port := d.bootPort
	cfg.Prefill = []config.Prefill{{URL: d.prefillURL, BootstrapPort: &port}}
	cfg.Decode = []config.Decode{{URL: d.decodeURL}}
	log := zerolog.New(io.Discard)
	if testing.Verbose() {
		log = zerolog.New(zerolog.NewTestWriter(t))
	}
	svc, err := New(&cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	d.releasePort()
	if err := svc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Shutdown(context.Background()) })
	d.svc, d.URL = svc, "http://"+svc.Addr()
}

// waitRegistered fails the test unless the prefill registers within d.
func (d *seedDeployment) waitRegistered(within time.Duration) {
	d.t.Helper()
	select {
	case <-d.prefill.Registered():
	case <-time.After(within):
		d.t.Fatalf("prefill not registered after %v: %+v", within, d.prefill.Stats())
	}
}

// generations is how many generation requests the engines received.
func (d *seedDeployment) generations() (prefill, decode int64) {
	return d.prefill.Stats().Requests["/generate"], d.decode.Stats().Requests["/generate"]
}

func seedLog(t *testing.T) zerolog.Logger {
	if testing.Verbose() {
		return zerolog.New(zerolog.NewTestWriter(t))
	}
	return zerolog.Nop()
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// lastRoom is the most recent room an engine recorded.
func lastRoom(t *testing.T, e *mock.Engine) mock.RoomRecord {
	t.Helper()
	rooms := e.Stats().Rooms
	if len(rooms) == 0 {
		t.Fatal("engine recorded no bootstrap room")
	}
	return rooms[len(rooms)-1]
}

// prefillSaw waits for the prefill's record and body of room: pdlb answers
// from the decode, so the prefill leg may finish after the client's answer.
func prefillSaw(t *testing.T, e *mock.Engine, room uint64) (mock.RoomRecord, []byte) {
	t.Helper()
	var rec mock.RoomRecord
	var body []byte
	found := proxytest.WaitFor(2*time.Second, func() bool {
		st := e.Stats()
		rec, body = mock.RoomRecord{}, nil
		for _, r := range st.Rooms {
			if r.Room == room {
				rec = r
			}
		}
		for _, b := range st.Bodies {
			if gjson.GetBytes(b.Body, "bootstrap_room").Raw == strconv.FormatUint(room, 10) {
				body = b.Body
			}
		}
		return rec.Room == room && body != nil
	})
	if !found {
		t.Fatalf("prefill never saw room %d: %+v", room, e.Stats().Rooms)
	}
	return rec, body
}

// TestSeedRace is the seed race: the prefill registers 1.5 s after pdlb and
// the decode are up. Meanwhile every registry lookup is a 503 (never a 500,
// never a body), every client request a fast 503 with Retry-After that no
// backend sees; once registration completes, requests succeed without a
// restart.
func TestSeedRace(t *testing.T) {
	const delay = 1500 * time.Millisecond
	d := newSeed(t, mock.Options{DP: 2, TP: 2, RegisterDelay: delay}, mock.Options{}, true)
	d.startPDLB()
	servedAt := time.Now()
	d.servePrefill()

	// A namespace with one rank of four is not ready either: register rank
	// (dp 1, tp 1) by hand; the prefill's own PUT of it later replaces it.
	pageSize, dtype := 1, "auto"
	err := bootstrap.NewRegistrar(bootstrap.RegistrarOptions{URL: d.bootURL, Attempts: 1}).Register(context.Background(),
		bootstrap.RankRegistration{AttnTPSize: 2, AttnTPRank: 1, AttnCPSize: 1, AttnDPSize: 2, AttnDPRank: 1, PPSize: 1,
			SystemDPSize: 1, RankIP: "127.0.0.1", RankPort: 29999, PageSize: &pageSize, KVCacheDtype: &dtype,
			LoadBalanceMethod: "follow_bootstrap_room"})
	if err != nil {
		t.Fatal(err)
	}

	queries := []string{
		bootstrap.SentinelQuery,
		"prefill_dp_rank=1&prefill_cp_rank=0&target_tp_rank=1&target_pp_rank=0", // the one registered
		"prefill_dp_rank=0&prefill_cp_rank=0&target_tp_rank=0&target_pp_rank=0",
	}
	rounds := 0
	var took503 []time.Duration
	for time.Since(servedAt) < delay-400*time.Millisecond {
		rounds++
		for _, q := range queries {
			resp, body := proxytest.Get(t, d.bootURL+"/route?"+q)
			if resp.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("GET /route?%s before registration: status %d %q, want 503", q, resp.StatusCode, body)
			}
			if resp.Header.Get("Retry-After") == "" {
				t.Errorf("GET /route?%s: 503 without Retry-After", q)
			}
			if json.Valid([]byte(body)) {
				t.Fatalf("GET /route?%s: 503 with a JSON body %q: a decode could take it for info", q, body)
			}
			if !strings.Contains(body, "1 of 4") {
				t.Errorf("GET /route?%s: %q does not say 1 of 4 ranks registered", q, body)
			}
		}
		for _, path := range []string{"/generate", "/v1/chat/completions"} {
			start := time.Now()
			resp, body := proxytest.Post(t, d.URL+path, `{"text":"hi","messages":[{"role":"user","content":"hi"}]}`)
			took := time.Since(start)
			if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
				t.Fatalf("POST %s before registration: status %d Retry-After %q %q, want 503 with Retry-After",
					path, resp.StatusCode, resp.Header.Get("Retry-After"), body)
			}
			took503 = append(took503, took)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if rounds < 3 {
		t.Fatalf("only %d rounds before registration: the race window was not exercised", rounds)
	}
	// Fast means nothing waited: the typical 503 well under 100ms, and not
	// one near the second a decode would back off for (an outlier under
	// -race on a busy machine is the scheduler, not pdlb).
	slices.Sort(took503)
	if med, worst := took503[len(took503)/2], took503[len(took503)-1]; med > 100*time.Millisecond || worst > 500*time.Millisecond {
		t.Errorf("503s took median %v, worst %v; want < 100ms and < 500ms", med, worst)
	}
	if p, dc := d.generations(); p != 0 || dc != 0 {
		t.Fatalf("backends saw requests before registration: prefill %d, decode %d", p, dc)
	}

	d.waitRegistered(5 * time.Second)
	if took := time.Since(servedAt); took < delay {
		t.Fatalf("registered after %v, before RegisterDelay %v", took, delay)
	}
	resp, body := proxytest.Get(t, d.bootURL+"/route?"+bootstrap.SentinelQuery)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("sentinel after registration: %d %q", resp.StatusCode, body)
	}
	info := gjson.Parse(body)
	if info.Get("dp_size").Int() != 2 || info.Get("attn_tp_size").Int() != 2 || !info.Get("follow_bootstrap_room").Bool() {
		t.Fatalf("sentinel after registration: %s", body)
	}
	for i, req := range []string{`{"text":"hi"}`, `{"text":"hi","stream":true}`, `{"text":"hi","disagg_prefill_dp_rank":1}`} {
		resp, body := proxytest.Post(t, d.URL+"/generate", req)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d after registration: %d %q", i, resp.StatusCode, body)
		}
	}
	if !proxytest.WaitFor(2*time.Second, func() bool { p, dc := d.generations(); return p == 3 && dc == 3 }) {
		p, dc := d.generations()
		t.Fatalf("after registration the engines saw prefill %d, decode %d requests, want 3 each", p, dc)
	}
	if rec := lastRoom(t, d.decode); rec.Addr != "127.0.0.1:"+strconv.Itoa(d.bootPort) || rec.DPRank != 1 {
		t.Fatalf("decode resolved %+v, want prefill dp rank 1 at the registry", rec)
	}
	// The registry's progress and traffic show in /metrics.
	_, metrics := proxytest.Get(t, d.URL+"/metrics")
	for _, want := range []string{
		`pdlb_registry_ranks_registered{url="` + d.prefillURL + `",bootstrap="127.0.0.1:` + strconv.Itoa(d.bootPort) + `"} 4`,
		`pdlb_registry_ranks_expected{url="` + d.prefillURL + `",bootstrap="127.0.0.1:` + strconv.Itoa(d.bootPort) + `"} 4`,
		`pdlb_bootstrap_requests_total{path="/route",status="503"}`,
		`pdlb_bootstrap_requests_total{path="/route",status="200"}`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestSeedRankFirstRequest: the very first request of a fresh deployment
// names disagg_prefill_dp_rank 1 (prefill dp=2) and succeeds; both engines
// see the rank and a room that agrees with it.
func TestSeedRankFirstRequest(t *testing.T) {
	d := newSeed(t, mock.Options{DP: 2}, mock.Options{}, true)
	d.startPDLB()
	d.servePrefill()
	d.waitRegistered(5 * time.Second)

	resp, body := proxytest.Post(t, d.URL+"/generate", `{"text":"hi","disagg_prefill_dp_rank":1}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("first request: %d %q", resp.StatusCode, body)
	}
	ds := d.decode.Stats()
	dr := lastRoom(t, d.decode)
	pr, pBody := prefillSaw(t, d.prefill, dr.Room)
	if got := gjson.GetBytes(pBody, "routed_dp_rank"); got.Type != gjson.Number || got.Int() != 1 {
		t.Errorf("prefill body routed_dp_rank = %s, want 1: %s", got.Raw, pBody)
	}
	if got := gjson.GetBytes(ds.LastBody, "disagg_prefill_dp_rank"); got.Type != gjson.Number || got.Int() != 1 {
		t.Errorf("decode body disagg_prefill_dp_rank = %s, want 1: %s", got.Raw, ds.LastBody)
	}
	if pr.DPRank != 1 || dr.DPRank != 1 {
		t.Errorf("prefill dispatched to dp rank %d, decode resolved %d, want 1 and 1", pr.DPRank, dr.DPRank)
	}
	if pr.Room != dr.Room || pr.Room%2 != 1 {
		t.Errorf("rooms: prefill %d, decode %d; want equal and odd", pr.Room, dr.Room)
	}

	// routed_dp_rank names the rank too; without a rank the room decides,
	// and both engines must agree on it.
	resp, body = proxytest.Post(t, d.URL+"/generate", `{"text":"hi","routed_dp_rank":0}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("routed_dp_rank 0: %d %q", resp.StatusCode, body)
	}
	dr = lastRoom(t, d.decode)
	if pr, _ := prefillSaw(t, d.prefill, dr.Room); pr.DPRank != 0 || dr.DPRank != 0 || pr.Room%2 != 0 {
		t.Errorf("routed_dp_rank 0: prefill %+v, decode %+v", pr, dr)
	}
	for i := 0; i < 6; i++ {
		if resp, body := proxytest.Post(t, d.URL+"/generate", `{"text":"hi"}`); resp.StatusCode != http.StatusOK {
			t.Fatalf("request without rank: %d %q", resp.StatusCode, body)
		}
		dr := lastRoom(t, d.decode)
		pr, _ := prefillSaw(t, d.prefill, dr.Room)
		if pr.DPRank != int(pr.Room%2) || dr.DPRank != pr.DPRank {
			t.Fatalf("without rank: prefill %+v, decode %+v; want room %% 2 on both", pr, dr)
		}
	}

	before, _ := d.generations()
	for _, field := range []string{"disagg_prefill_dp_rank", "routed_dp_rank"} {
		resp, body := proxytest.Post(t, d.URL+"/generate", `{"text":"hi","`+field+`":2}`)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, field) {
			t.Errorf("%s 2 with dp=2: %d %q, want 400 naming the field", field, resp.StatusCode, body)
		}
	}
	if after, _ := d.generations(); after != before {
		t.Errorf("out-of-range ranks reached the prefill (%d → %d requests)", before, after)
	}
}

// TestSeedRankSlowPath: a request naming a rank while the prefill has not
// registered yet waits (bounded by bootstrap.info_wait) and succeeds when
// the prefill registers within the bound; otherwise it gets 503 with
// Retry-After, never a 500.
func TestSeedRankSlowPath(t *testing.T) {
	t.Run("registers within the bound", func(t *testing.T) {
		d := newSeed(t, mock.Options{DP: 2, RegisterDelay: 300 * time.Millisecond}, mock.Options{}, true)
		d.infoWait = 3 * time.Second
		d.startPDLB()
		d.servePrefill()
		start := time.Now()
		resp, body := proxytest.Post(t, d.URL+"/generate", `{"text":"hi","disagg_prefill_dp_rank":1}`)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("rank request during registration: %d %q after %v, want 200 once the prefill registered",
				resp.StatusCode, body, time.Since(start))
		}
		if pr, _ := prefillSaw(t, d.prefill, lastRoom(t, d.decode).Room); pr.DPRank != 1 || pr.Room%2 != 1 {
			t.Errorf("prefill dispatched %+v, want dp rank 1 and an odd room", pr)
		}
	})
	t.Run("not within the bound", func(t *testing.T) {
		d := newSeed(t, mock.Options{DP: 2}, mock.Options{}, false)
		d.infoWait = 300 * time.Millisecond
		d.startPDLB()
		d.servePrefill()
		start := time.Now()
		resp, body := proxytest.Post(t, d.URL+"/generate", `{"text":"hi","disagg_prefill_dp_rank":1}`)
		took := time.Since(start)
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("rank request, prefill never registers: %d Retry-After %q %q, want 503 with Retry-After",
				resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
		if took < d.infoWait-50*time.Millisecond || took > d.infoWait+time.Second {
			t.Errorf("503 after %v, want after waiting about info_wait %v on the slow path", took, d.infoWait)
		}
		if p, dc := d.generations(); p != 0 || dc != 0 {
			t.Errorf("backends saw the request: prefill %d, decode %d", p, dc)
		}
	})
}

// sleepRecorder is a mock.Options.Sleep that records every wait and
// shortens none of them.
type sleepRecorder struct {
	mu     sync.Mutex
	delays []time.Duration
	n      atomic.Int32
}

func (s *sleepRecorder) sleep(ctx context.Context, d time.Duration) error {
	if d > 0 { // RegisterDelay 0 is not a backoff
		s.mu.Lock()
		s.delays = append(s.delays, d)
		s.mu.Unlock()
		s.n.Add(1)
	}
	return pdlb.SleepContext(ctx, d)
}

func (s *sleepRecorder) recorded() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.delays...)
}

// TestSeedRegistrationRetry: the prefill starts before the registry
// (nothing listens on its bootstrap port); its registration fails, backs
// off, and succeeds on a later attempt once pdlb starts.
func TestSeedRegistrationRetry(t *testing.T) {
	var rec sleepRecorder
	d := newSeed(t, mock.Options{DP: 2, RegisterBackoff: 100 * time.Millisecond, Sleep: rec.sleep}, mock.Options{}, true)
	d.releasePort()
	d.servePrefill()
	if !proxytest.WaitFor(3*time.Second, func() bool { return rec.n.Load() >= 2 }) {
		t.Fatalf("no backoff seen while the registry is down: %v", rec.recorded())
	}
	if s := d.prefill.Stats(); s.Registered || s.RegistrationFailed {
		t.Fatalf("registration settled with no registry: %+v", s)
	}
	d.startPDLB()
	d.waitRegistered(5 * time.Second)
	delays := rec.recorded()
	for _, dl := range delays[:2] { // both ranks' first backoff: 100ms × [0.75, 1)
		if dl < 75*time.Millisecond || dl > 100*time.Millisecond {
			t.Errorf("first backoff %v, want 100ms × [0.75, 1)", dl)
		}
	}
	if resp, body := proxytest.Post(t, d.URL+"/generate", `{"text":"hi","disagg_prefill_dp_rank":1}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("request after the late registration: %d %q", resp.StatusCode, body)
	}
}

// TestSeedRegistrationFailFast: when registration never succeeds, a
// FailFast prefill reports the failure on Engine.Fatal (what `pdlb mock`
// turns into a non-zero exit); without FailFast it keeps running
// unregistered, as SGLang does.
func TestSeedRegistrationFailFast(t *testing.T) {
	for _, failFast := range []bool{true, false} {
		t.Run("fail_fast="+strconv.FormatBool(failFast), func(t *testing.T) {
			var rec sleepRecorder
			o := mock.Options{RegisterAttempts: 3, RegisterBackoff: time.Millisecond, Sleep: rec.sleep, FailFast: failFast}
			d := newSeed(t, o, mock.Options{}, true) // pdlb never starts
			d.releasePort()
			d.servePrefill()
			if !proxytest.WaitFor(3*time.Second, func() bool { return d.prefill.Stats().RegistrationFailed }) {
				t.Fatalf("registration did not give up: %+v", d.prefill.Stats())
			}
			if n := len(rec.recorded()); n != 2 {
				t.Errorf("%d backoffs for 3 attempts, want 2 (none after the last)", n)
			}
			select {
			case <-d.prefill.Registered():
				t.Fatal("Registered closed although every attempt failed")
			default:
			}
			select {
			case err := <-d.prefill.Fatal():
				if !failFast {
					t.Fatalf("Fatal without FailFast: %v", err)
				}
				if !errors.Is(err, bootstrap.ErrRegistrationFailed) || !strings.Contains(err.Error(), "connection refused") {
					t.Errorf("Fatal = %v, want ErrRegistrationFailed naming the root cause", err)
				}
			case <-time.After(200 * time.Millisecond):
				if failFast {
					t.Fatal("FailFast prefill reported nothing on Fatal")
				}
			}
		})
	}
}
