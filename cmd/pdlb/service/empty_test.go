package service

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"pdlb/config"
	"pdlb/proxy/proxytest"

	"github.com/rs/zerolog"
)

// pdlb may start with no engine at all, as an autoscaler that adds them
// through the admin API wants (sglang #12535): not ready, saying what is
// missing, requests answered 503; ready and serving once engines join.
func TestStartWithoutBackendsThenJoin(t *testing.T) {
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	d := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{"text":"ok"}`))
	logs := &proxytest.SyncBuffer{}
	cfg := testConfig()
	cfg.Admin = config.Admin{Host: "127.0.0.1", Port: proxytest.FreePort(t)}
	defaults := config.Default() // a config file that lists no engine
	defaults.Prefill, defaults.Decode = nil, nil
	if err := defaults.Validate(); err != nil {
		t.Fatalf("empty backend lists with the defaults (admin API on): %v", err)
	}
	svc := startService(t, &cfg, zerolog.New(logs))
	url, admin := "http://"+svc.Addr(), "http://127.0.0.1:"+strconv.Itoa(cfg.Admin.Port)

	resp, body := proxytest.Get(t, url+"/readiness")
	if resp.StatusCode != 503 || !strings.Contains(body, "no prefill backend configured") || !strings.Contains(body, "no decode backend configured") {
		t.Fatalf("readiness with no engine: %d %s", resp.StatusCode, body)
	}
	resp, body = proxytest.Post(t, url+"/generate", `{"text":"hi"}`)
	var e proxytest.ErrorBody
	if resp.StatusCode != 503 || json.Unmarshal([]byte(body), &e) != nil || !strings.Contains(e.Error.Message, "no prefill backend configured") {
		t.Fatalf("generate with no engine: %d %s", resp.StatusCode, body)
	}
	for _, role := range []string{"prefill", "decode"} {
		if !strings.Contains(string(logs.Bytes()), "no "+role+" backend in the configuration") {
			t.Errorf("no warning about the missing %s: %s", role, logs.Bytes())
		}
	}

	for role, e := range map[string]*proxytest.Engine{"prefill": p, "decode": d} {
		if resp, body := proxytest.Post(t, admin+"/workers", `{"role":"`+role+`","url":"`+e.URL+`"}`); resp.StatusCode != 201 {
			t.Fatalf("POST /workers %s: %d %s", role, resp.StatusCode, body)
		}
	}
	if !proxytest.WaitFor(5*time.Second, func() bool { r, _ := proxytest.Get(t, url+"/readiness"); return r.StatusCode == 200 }) {
		_, body := proxytest.Get(t, url+"/readiness")
		t.Fatalf("not ready once both joined: %s", body)
	}
	if resp, body := proxytest.Post(t, url+"/generate", `{"text":"hi"}`); resp.StatusCode != 200 || !strings.Contains(body, "ok") {
		t.Fatalf("generate once both joined: %d %s", resp.StatusCode, body)
	}
}
