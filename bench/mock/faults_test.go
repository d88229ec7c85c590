package mock

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestInjectedErrors(t *testing.T) {
	e, url := startEngine(t, Options{ErrorRate: 1, ErrorStatus: 503})
	for _, tc := range []struct{ route, body string }{
		{"/generate", `{"text":"a","bootstrap_room":1}`},
		{"/generate", `{"text":"a","bootstrap_room":1,"stream":true}`},
		{"/v1/chat/completions", `{"messages":[],"bootstrap_room":1}`},
	} {
		if status, b := post(t, url+tc.route, tc.body); status != 503 {
			t.Errorf("%s %s: status %d body %s, want 503", tc.route, tc.body, status, b)
		}
	}
	if got := e.Stats().Injected; got != 3 {
		t.Errorf("Injected %d, want 3", got)
	}
}

func TestSeededFaultsRepeat(t *testing.T) {
	run := func() string {
		_, url := startEngine(t, Options{ErrorRate: 0.5, Seed: 7, TokenDelay: -1})
		var s strings.Builder
		for i := 0; i < 24; i++ {
			status, _ := post(t, url+"/generate", `{"text":"a","bootstrap_room":1}`)
			s.WriteString(map[bool]string{true: "E", false: "."}[status == 500])
		}
		return s.String()
	}
	a, b := run(), run()
	if a != b || !strings.Contains(a, "E") || !strings.Contains(a, ".") {
		t.Errorf("same seed gave %s and %s", a, b)
	}
}

func TestStallHoldsUntilClientLeaves(t *testing.T) {
	e, url := startEngine(t, Options{StallProb: 1})
	c := client(t, 300*time.Millisecond)
	start := time.Now()
	_, err := c.Post(url+"/generate", "application/json", strings.NewReader(`{"text":"a","bootstrap_room":1}`))
	if err == nil {
		t.Fatal("stalled request was answered")
	}
	if time.Since(start) < 250*time.Millisecond {
		t.Errorf("client gave up after %v, before its timeout", time.Since(start))
	}
	if e.Stats().Stalls != 1 {
		t.Errorf("Stalls %d", e.Stats().Stalls)
	}
	eventually(t, 2*time.Second, "stall to end after the client left", func() bool { return e.Stats().InFlight == 0 })
}

func TestAbortEndsStream(t *testing.T) {
	e, url := startEngine(t, Options{TokenDelay: 10 * time.Millisecond, OutputLen: 10000})
	r, _ := openStream(t, url+"/generate", `{"text":"a","rid":"ab1","bootstrap_room":1,"stream":true}`)
	if _, err := readEvent(r); err != nil {
		t.Fatal(err)
	}
	post(t, url+"/abort_request", `{"rid":"ab1"}`)
	var last string
	for {
		ev, err := readEvent(r)
		if err != nil {
			t.Fatalf("stream broke instead of ending: %v", err)
		}
		if ev == "[DONE]" {
			break
		}
		last = ev
	}
	if path(decode(t, []byte(last)), "meta_info", "finish_reason", "type") != "abort" {
		t.Errorf("last event before [DONE] %s", last)
	}
	eventually(t, time.Second, "slot release", func() bool { return e.Stats().InFlight == 0 })
}

func TestDieMidStream(t *testing.T) {
	e, url := startEngine(t, Options{DieMidStreamProb: 1, TokenDelay: time.Millisecond, OutputLen: 6})
	resp, err := client(t, 5*time.Second).Post(url+"/generate", "application/json",
		strings.NewReader(`{"text":"a","bootstrap_room":1,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("read error %v, want unexpected EOF", err)
	}
	if got := strings.Count(string(b), "data: "); got != 3 || strings.Contains(string(b), "[DONE]") {
		t.Errorf("got %d events before dying, want 3 and no [DONE]: %q", got, b)
	}
	if e.Stats().Deaths != 1 {
		t.Errorf("Deaths %d", e.Stats().Deaths)
	}
}

func TestDieWithoutAnswer(t *testing.T) {
	_, url := startEngine(t, Options{DieMidStreamProb: 1})
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Post(url+"/generate", "application/json",
		strings.NewReader(`{"text":"a","bootstrap_room":1}`))
	if err == nil {
		resp.Body.Close()
		t.Fatalf("got an answer (%d) from a dying engine", resp.StatusCode)
	}
}

func TestSlowStart(t *testing.T) {
	var now atomic.Int64
	base := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return base.Add(time.Duration(now.Load())) }
	_, url := startEngine(t, Options{SlowStart: time.Minute, Clock: clock})
	if status, _, _ := do(t, "GET", url+"/health", ""); status != 503 {
		t.Errorf("/health while starting: %d", status)
	}
	if status, b := post(t, url+"/generate", `{"text":"a","bootstrap_room":1}`); status != 503 {
		t.Errorf("/generate while starting: %d %s", status, b)
	}
	now.Store(int64(time.Minute))
	if status, _, _ := do(t, "GET", url+"/health", ""); status != 200 {
		t.Errorf("/health after start: %d", status)
	}
	if status, _ := post(t, url+"/generate", `{"text":"a","bootstrap_room":1}`); status != 200 {
		t.Errorf("/generate after start: %d", status)
	}
}

// A batch's items are aborted by the names SGLang gives them: each of a
// rid list, or "<rid>_<i>" for one rid string; any of them ends the batch.
func TestAbortEndsBatchByItemRid(t *testing.T) {
	for _, c := range []struct{ body, abort string }{
		{`{"text":["a","b"],"rid":["x","y"],"bootstrap_room":1,"stream":true}`, "y"},
		{`{"text":["a","b"],"rid":"z","bootstrap_room":1,"stream":true}`, "z_1"},
	} {
		e, url := startEngine(t, Options{TokenDelay: 10 * time.Millisecond, OutputLen: 10000})
		r, _ := openStream(t, url+"/generate", c.body)
		if _, err := readEvent(r); err != nil {
			t.Fatal(err)
		}
		post(t, url+"/abort_request", `{"rid":"`+c.abort+`"}`)
		for {
			ev, err := readEvent(r)
			if err != nil {
				t.Fatalf("%s: stream broke instead of ending: %v", c.body, err)
			}
			if ev == "[DONE]" {
				break
			}
		}
		eventually(t, time.Second, "slot release", func() bool { return e.Stats().InFlight == 0 })
	}
}

// NoAbortRoute: an engine without /abort_request answers 404 and records nothing.
func TestNoAbortRoute(t *testing.T) {
	e, url := startEngine(t, Options{NoAbortRoute: true})
	if status, _ := post(t, url+"/abort_request", `{"rid":"r"}`); status != 404 {
		t.Errorf("abort_request %d, want 404", status)
	}
	if got := e.Stats().Aborted; len(got) != 0 {
		t.Errorf("Aborted %v", got)
	}
}
