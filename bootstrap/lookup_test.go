package bootstrap

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"pdlb/config"
	"pdlb/proxy/proxytest"
)

func TestFetchPrefillInfoWaitsForReady(t *testing.T) {
	e := startRegistry(t, config.Bootstrap{})
	mustStatus(t, "PUT dp0", e.do(t, "PUT", "/route", rankPUT(1, 0, 2, 0, "10.0.0.1", 17000, nil)), 200)
	sl := sleepRecorder{hook: func(n int) {
		if n == 3 { // the last rank arrives after the third 503
			mustStatus(t, "PUT dp1", e.do(t, "PUT", "/route", rankPUT(1, 0, 2, 1, "10.0.0.2", 17001, nil)), 200)
		}
	}}
	info, err := FetchPrefillInfo(context.Background(), &fasthttp.Client{}, e.base, 20, time.Second, sl.Sleep)
	if err != nil {
		t.Fatal(err)
	}
	if info.DPSize != 2 || info.AttnTPSize != 1 || *info.PageSize != 64 {
		t.Fatalf("info %+v", info)
	}
	if len(sl.delays) != 3 || sl.delays[0] != time.Second {
		t.Fatalf("sleeps %v, want 3 × 1s", sl.delays)
	}
	ri, err := FetchRank(context.Background(), nil, e.base, 3, time.Second, sl.Sleep, 1, 0, 0, 0)
	if err != nil || ri != (RankInfo{"10.0.0.2", 17001}) {
		t.Fatalf("FetchRank = %+v, %v", ri, err)
	}
}

func TestFetchPrefillInfoGivesUp(t *testing.T) {
	e := startRegistry(t, config.Bootstrap{})
	mustStatus(t, "PUT", e.do(t, "PUT", "/route", rankPUT(2, 0, 2, 0, "10.0.0.1", 17000, nil)), 200)
	var sl sleepRecorder
	d := config.Default().Bootstrap
	_, err := FetchPrefillInfo(context.Background(), nil, e.base, d.LookupAttempts, d.LookupInterval, sl.Sleep)
	if !errors.Is(err, ErrNotReady) {
		t.Fatalf("err = %v", err)
	}
	want := "prefill info from " + e.base + " not ready after 20 attempts: Prefill server not fully registered yet (1 of 4 ranks registered)."
	if err.Error() != want {
		t.Fatalf("message\n got %q\nwant %q", err.Error(), want)
	}
	if len(sl.delays) != 19 {
		t.Fatalf("%d sleeps, want 19 (none after the last attempt)", len(sl.delays))
	}
}

func TestFetchRankNotFoundIsNotRetried(t *testing.T) {
	e := startRegistry(t, config.Bootstrap{})
	mustStatus(t, "PUT", e.do(t, "PUT", "/route", rankPUT(1, 0, 1, 0, "10.0.0.1", 17000, nil)), 200)
	var sl sleepRecorder
	_, err := FetchRank(context.Background(), nil, e.base, 20, time.Second, sl.Sleep, 3, 0, 0, 0)
	if !errors.Is(err, ErrRankNotFound) || len(sl.delays) != 0 {
		t.Fatalf("err=%v sleeps=%d", err, len(sl.delays))
	}
	mustContain(t, "404 message", err.Error(), "Bootstrap info not found for dp_rank=3 cp_rank=0 tp_rank=0 pp_rank=0")
}

func TestFetchPrefillInfoUnreachable(t *testing.T) {
	var sl sleepRecorder
	_, err := FetchPrefillInfo(context.Background(), nil, "http://"+proxytest.ClosedAddr(t), 3, time.Millisecond, sl.Sleep)
	if !errors.Is(err, ErrNotReady) || len(sl.delays) != 2 {
		t.Fatalf("err=%v sleeps=%d", err, len(sl.delays))
	}
	mustContain(t, "message", err.Error(), "not ready after 3 attempts: connection refused")
}
