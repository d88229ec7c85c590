package service

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"pdlb/bench/mock"
	"pdlb/config"
	"pdlb/proxy/proxytest"
)

// repeatedKey returns the first key that occurs twice in one object of the
// JSON text line (at any depth), or "" when there is none. json.Unmarshal
// would silently keep one of them, as jq does; Loki and Elasticsearch do
// not agree on which.
func repeatedKey(line []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	type frame struct {
		object bool
		seen   map[string]bool
		key    bool // the next string token in an object is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return "", nil
		}
		if err != nil {
			return "", err
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if d, ok := tok.(json.Delim); !(ok && d == '}') && top != nil && top.object && top.key {
			k := tok.(string)
			if top.seen[k] {
				return k, nil
			}
			top.seen[k] = true
			top.key = false
			continue
		}
		if d, ok := tok.(json.Delim); ok {
			switch d {
			case '{':
				stack = append(stack, &frame{object: true, seen: map[string]bool{}, key: true})
				continue
			case '[':
				stack = append(stack, &frame{})
				continue
			case '}', ']':
				stack = stack[:len(stack)-1]
			}
		}
		// A value ended: in an object, a key comes next.
		if len(stack) > 0 && stack[len(stack)-1].object {
			stack[len(stack)-1].key = true
		}
	}
}

func TestRepeatedKeyFinder(t *testing.T) {
	for _, c := range []struct{ line, want string }{
		{`{"a":1,"b":{"a":2},"c":[{"a":1},{"a":2}]}`, ""},
		{`{"component":"x","level":"info","component":"y"}`, "component"},
		{`{"a":{"b":1,"b":2}}`, "b"},
		{`{"a":[{"x":1,"x":1}]}`, "x"},
	} {
		if got, err := repeatedKey([]byte(c.line)); err != nil || got != c.want {
			t.Errorf("%s: %q %v, want %q", c.line, got, err, c.want)
		}
	}
}

// TestNoLogLineRepeatsAKey runs pdlb through what makes most of its
// components log (an embedded registry with a registering prefill and a
// looking-up decode, requests that succeed, fail and are retried, a
// breaker opening, health checks, the admin API adding and draining a
// worker, an external-mode poller whose registry is unreachable) with
// JSON logs at debug, and requires that no line repeats a key: the
// registry and the poller logged "component" twice.
func TestNoLogLineRepeatsAKey(t *testing.T) {
	logs := &proxytest.SyncBuffer{}
	log := zerolog.New(logs).Level(zerolog.DebugLevel).With().Timestamp().Logger()

	bootPort, adminPort := proxytest.FreePort(t), proxytest.FreePort(t)
	bootURL := "http://127.0.0.1:" + strconv.Itoa(bootPort)
	prefill := mock.New(mock.Options{Role: mock.RolePrefill, Bootstrap: bootURL, TokenDelay: -1, RegisterBackoff: 20 * time.Millisecond}, log)
	prefillLn := listen(t)
	decode := mock.New(mock.Options{Role: mock.RoleDecode, Lookup: true, TokenDelay: -1, LookupAttempts: 50, LookupInterval: 20 * time.Millisecond}, log)
	decodeLn := listen(t)
	go decode.Serve(decodeLn)
	t.Cleanup(func() { prefill.Shutdown(); decode.Shutdown() })
	// Healthy (its /health answers 200) but overloaded: generations get 503.
	overloaded := proxytest.NewEngine(t, func(ctx *fasthttp.RequestCtx) {
		if ctx.IsGet() {
			ctx.SetStatusCode(200)
			return
		}
		proxytest.JSONAnswer(503, `{"error":"overloaded"}`)(ctx)
	})

	cfg := testConfig()
	cfg.Bootstrap = config.Default().Bootstrap
	cfg.Bootstrap.ListenHost = "127.0.0.1"
	cfg.Breaker = config.Breaker{Enabled: true, ConsecutiveFailures: 1, OpenTimeout: time.Minute, HalfOpenMaxRequests: 1, Window: time.Minute}
	cfg.Health = config.Health{Interval: 20 * time.Millisecond, Timeout: time.Second, FailThreshold: 1, PassThreshold: 1}
	cfg.Retry = config.Retry{MaxAttempts: 3, Initial: time.Millisecond, Max: 5 * time.Millisecond}
	cfg.Admin = config.Admin{Host: "127.0.0.1", Port: adminPort}
	cfg.Prefill = []config.Prefill{{URL: "http://" + prefillLn.Addr().String(), BootstrapPort: &bootPort}}
	cfg.Decode = []config.Decode{{URL: "http://" + decodeLn.Addr().String()}, {URL: overloaded.URL}}
	svc := startService(t, &cfg, log)
	go prefill.Serve(prefillLn)
	url := "http://" + svc.Addr()
	admin := "http://127.0.0.1:" + strconv.Itoa(adminPort)

	if !proxytest.WaitFor(10*time.Second, func() bool { r, _ := proxytest.Get(t, url+"/readiness"); return r.StatusCode == 200 }) {
		t.Fatal("pdlb never ready")
	}
	for i := 0; i < 6; i++ {
		proxytest.Post(t, url+"/generate", `{"text":"hi","sampling_params":{"max_new_tokens":4}}`)
		proxytest.Post(t, url+"/generate", `{"text":"hi","stream":true,"sampling_params":{"max_new_tokens":4}}`)
	}
	proxytest.Post(t, url+"/generate", `{"text":`)
	proxytest.Post(t, admin+"/workers", `{"role":"decode","url":"`+overloaded.URL+`/"}`)
	req, _ := http.NewRequest(http.MethodDelete, admin+"/workers?url="+overloaded.URL, nil)
	resp, err := http.DefaultClient.Do(req)
	proxytest.ReadAll(t, resp, err)

	// External mode: a poller whose registry does not answer.
	ext := testConfig()
	ext.Bootstrap = config.Default().Bootstrap
	ext.Bootstrap.Mode, ext.Bootstrap.PollInterval = "external", 20*time.Millisecond
	deadPort := proxytest.FreePort(t)
	ext.Prefill = []config.Prefill{{URL: "http://127.0.0.1:" + strconv.Itoa(proxytest.FreePort(t)), BootstrapPort: &deadPort}}
	ext.Decode = []config.Decode{{URL: overloaded.URL}}
	startService(t, &ext, log)
	if !proxytest.WaitFor(5*time.Second, func() bool { return bytes.Contains(logs.Bytes(), []byte("prefill registry not ready")) }) {
		t.Fatal("the poller never reported its unreachable registry")
	}

	lines := bytes.Split(bytes.TrimSpace(logs.Bytes()), []byte("\n"))
	seen := map[string]bool{}
	for _, line := range lines {
		k, err := repeatedKey(line)
		if err != nil {
			t.Fatalf("not a JSON line: %s: %v", line, err)
		}
		if k != "" {
			t.Errorf("key %q repeated: %s", k, line)
		}
		var m map[string]any
		json.Unmarshal(line, &m)
		seen[fmt.Sprint(m["message"])] = true
	}
	// The run did reach the components whose lines had the repeated key.
	for _, msg := range []string{"prefill rank registered", "prefill fully registered", "circuit breaker state changed", "retrying on another pair", "worker drained", "request"} {
		if !seen[msg] {
			t.Errorf("no %q line: the scenario missed a component (%d lines)", msg, len(lines))
		}
	}
	if t.Failed() {
		t.Logf("messages: %s", strings.Join(keys(seen), " | "))
	}
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
