package mock

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"pdlb"
	"pdlb/bootstrap"
	"pdlb/config"
)

// startRegistry serves a real bootstrap registry namespace on a loopback
// port and returns its base URL and address.
func startRegistry(t *testing.T) (url, addr string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reg := bootstrap.NewRegistry(config.Bootstrap{}, zerolog.Nop(), pdlb.SystemClock())
	srv := reg.NewServer(ln.Addr().(*net.TCPAddr).Port)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	return "http://" + ln.Addr().String(), ln.Addr().String()
}

func waitRegistered(t *testing.T, e *Engine) {
	t.Helper()
	select {
	case <-e.Registered():
	case <-time.After(5 * time.Second):
		t.Fatalf("not registered: %+v", e.Stats())
	}
}

func lastRecord(t *testing.T, e *Engine) RoomRecord {
	t.Helper()
	rooms := e.Stats().Rooms
	if len(rooms) == 0 {
		t.Fatal("no room recorded")
	}
	return rooms[len(rooms)-1]
}

func TestBootstrapPrefillRegistersAndDispatches(t *testing.T) {
	regURL, _ := startRegistry(t)
	e, url := startEngine(t, Options{Role: RolePrefill, DP: 2, TP: 2, Bootstrap: regURL, TokenDelay: -1})
	waitRegistered(t, e)
	info, err := bootstrap.FetchPrefillInfo(context.Background(), nil, regURL, 1, time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	if info.DPSize != 2 || info.AttnTPSize != 2 || !info.FollowBootstrapRoom || info.PageSize == nil || *info.PageSize != 1 {
		t.Fatalf("registered info %+v", info)
	}
	for dp := 0; dp < 2; dp++ {
		for tp := 0; tp < 2; tp++ {
			if _, err := bootstrap.FetchRank(context.Background(), nil, regURL, 1, time.Millisecond, nil, dp, 0, tp, 0); err != nil {
				t.Errorf("rank dp=%d tp=%d: %v", dp, tp, err)
			}
		}
	}

	for _, tc := range []struct {
		body   string
		status int
		rank   int
		msg    string
	}{
		{`{"text":"a","bootstrap_room":5}`, 200, 1, ""},
		{`{"text":"a","bootstrap_room":6}`, 200, 0, ""},
		{`{"text":"a","bootstrap_room":5,"routed_dp_rank":1}`, 200, 1, ""},
		{`{"text":"a","bootstrap_room":5,"routed_dp_rank":0}`, 500, 0, "follow_bootstrap_room conflict: dispatched to dp_rank 0 but bootstrap_room 5 implies dp_rank 1."},
		{`{"text":"a","bootstrap_room":5,"routed_dp_rank":2}`, 400, 0, "routed_dp_rank 2 is out of range [0, 2)"},
	} {
		status, body := post(t, url+"/generate", tc.body)
		if status != tc.status || !strings.Contains(string(body), tc.msg) {
			t.Errorf("%s: %d %s, want %d %q", tc.body, status, body, tc.status, tc.msg)
			continue
		}
		if status == 200 {
			if rec := lastRecord(t, e); rec.DPRank != tc.rank {
				t.Errorf("%s: dispatched to %d, want %d", tc.body, rec.DPRank, tc.rank)
			}
		}
	}
}

func TestBootstrapDecodeResolves(t *testing.T) {
	regURL, addr := startRegistry(t)
	p, _ := startEngine(t, Options{Role: RolePrefill, DP: 2, Bootstrap: regURL, TokenDelay: -1})
	waitRegistered(t, p)
	_, url := startEngine(t, Options{Role: RoleDecode, Lookup: true, LookupAttempts: 2, LookupInterval: time.Millisecond, TokenDelay: -1})
	d := func(extra string) (int, string) {
		host, port, _ := net.SplitHostPort(addr)
		status, body := post(t, url+"/generate", `{"text":"a","rid":"r1","bootstrap_host":"`+host+`","bootstrap_port":`+port+`,"bootstrap_room":7`+extra+`}`)
		return status, string(body)
	}
	if status, body := d(""); status != 200 {
		t.Fatalf("room 7: %d %s", status, body)
	}
	if status, body := d(`,"disagg_prefill_dp_rank":0`); status != 200 {
		t.Fatalf("rank 0: %d %s", status, body)
	}
	status, body := d(`,"disagg_prefill_dp_rank":5`)
	want := "Decode handshake failed for request rank=0 req.rid=r1 req.bootstrap_room=7 with exception " +
		"Could not fetch bootstrap info for: prefill_dp_rank: 5 prefill_cp_rank: 0 target_tp_rank: 0 and target_pp_rank 0"
	if status != 500 || !strings.Contains(body, want) {
		t.Fatalf("rank 5: %d %s, want 500 %q", status, body, want)
	}
}

func TestBootstrapDecodeRecords(t *testing.T) {
	regURL, addr := startRegistry(t)
	p, _ := startEngine(t, Options{Role: RolePrefill, DP: 2, Bootstrap: regURL, TokenDelay: -1})
	waitRegistered(t, p)
	dec, url := startEngine(t, Options{Role: RoleDecode, Lookup: true, TokenDelay: -1})
	host, port, _ := net.SplitHostPort(addr)
	for _, tc := range []struct {
		extra string
		room  uint64
		rank  int
	}{
		{"", 7, 1},
		{"", 8, 0},
		{`,"disagg_prefill_dp_rank":0`, 7, 0},
		{`,"disagg_prefill_dp_rank":1`, 8, 1},
	} {
		body := fmt.Sprintf(`{"text":"a","bootstrap_host":%q,"bootstrap_port":%s,"bootstrap_room":%d%s}`, host, port, tc.room, tc.extra)
		if status, b := post(t, url+"/generate", body); status != 200 {
			t.Fatalf("%s: %d %s", body, status, b)
		}
		rec := lastRecord(t, dec)
		if rec.Room != tc.room || rec.DPRank != tc.rank || rec.Addr != addr {
			t.Errorf("%s: resolved %+v, want room %d rank %d at %s", body, rec, tc.room, tc.rank, addr)
		}
	}
	// The fake bootstrap host needs no registry.
	if status, b := post(t, url+"/generate", `{"text":"a","bootstrap_host":"2.2.2.2","bootstrap_room":0}`); status != 200 {
		t.Fatalf("fake host: %d %s", status, b)
	}
}

func TestBootstrapDecodeNotReady(t *testing.T) {
	_, addr := startRegistry(t) // nothing registers
	var sleeps atomic.Int32
	sleep := func(ctx context.Context, d time.Duration) error {
		sleeps.Add(1)
		return pdlb.SleepContext(ctx, d)
	}
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()
	_, url := startEngine(t, Options{Role: RoleDecode, Lookup: true, LookupAttempts: 3, LookupInterval: time.Millisecond, Sleep: sleep, TokenDelay: -1})
	for _, a := range []string{addr, closedAddr} {
		sleeps.Store(0)
		host, port, _ := net.SplitHostPort(a)
		status, body := post(t, url+"/generate", `{"text":"a","bootstrap_host":"`+host+`","bootstrap_port":`+port+`,"bootstrap_room":1}`)
		want := "Could not fetch prefill parallel info from " + a + " after 3 attempts"
		if status != 500 || !strings.Contains(string(body), want) {
			t.Errorf("%s: %d %s, want 500 %q", a, status, body, want)
		}
		if n := sleeps.Load(); n != 2 {
			t.Errorf("%s: %d waits for 3 attempts, want 2", a, n)
		}
	}
}
