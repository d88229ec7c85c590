package router

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"pdlb/proxy/proxytest"
)

func TestGenerateRelaysDecodeAnswerAndInjects(t *testing.T) {
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{"text":"prefill"}`))
	d := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{"text":"decoded","meta_info":{"id":"x"}}`))
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d})

	resp, body := proxytest.Post(t, l.URL+"/generate", `{"text":"hi","sampling_params":{"seed":18446744073709551615}}`)
	if resp.StatusCode != 200 || body != `{"text":"decoded","meta_info":{"id":"x"}}` {
		t.Fatalf("got %d %s", resp.StatusCode, body)
	}
	if resp.Header.Get("X-Request-ID") == "" {
		t.Error("no X-Request-ID echoed")
	}
	// The prefill leg runs concurrently with the decode's answer.
	proxytest.WaitFor(time.Second, func() bool { return p.Count() == 1 })
	pb, db := p.LastBody(), d.LastBody()
	if string(pb) != string(db) {
		t.Fatalf("prefill and decode got different bodies:\n%s\n%s", pb, db)
	}
	if !strings.Contains(string(db), `"seed":18446744073709551615`) {
		t.Errorf("big integer not passed through exactly: %s", db)
	}
	var m map[string]any
	dec := json.NewDecoder(strings.NewReader(string(db)))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("injected body is not JSON: %v\n%s", err, db)
	}
	if m["bootstrap_host"] != "127.0.0.1" || m["bootstrap_port"].(json.Number) != "8998" {
		t.Errorf("bootstrap fields wrong: %v", m)
	}
	if _, ok := m["bootstrap_room"].(json.Number); !ok {
		t.Errorf("bootstrap_room missing: %s", db)
	}
	// The client's own request ID reaches both legs and comes back.
	req, _ := http.NewRequest("POST", l.URL+"/generate", strings.NewReader(`{"text":"hi"}`))
	req.Header.Set("X-Request-ID", "client-42")
	httpResp, err := http.DefaultClient.Do(req)
	resp2, _ := proxytest.ReadAll(t, httpResp, err)
	if resp2.Header.Get("X-Request-ID") != "client-42" || d.LastID() != "client-42" ||
		!proxytest.WaitFor(time.Second, func() bool { return p.LastID() == "client-42" }) {
		t.Errorf("request ID: echoed %q, decode saw %q, prefill saw %q", resp2.Header.Get("X-Request-ID"), d.LastID(), p.LastID())
	}
	// One that is not plain visible ASCII is replaced: it is copied verbatim
	// into the engines' request heads.
	req, _ = http.NewRequest("POST", l.URL+"/generate", strings.NewReader(`{"text":"hi"}`))
	req.Header.Set("X-Request-ID", "two words\tü")
	httpResp, err = http.DefaultClient.Do(req)
	resp3, _ := proxytest.ReadAll(t, httpResp, err)
	if id := resp3.Header.Get("X-Request-ID"); !strings.HasPrefix(id, "req-") || d.LastID() != id {
		t.Errorf("request ID not replaced: echoed %q, decode saw %q", id, d.LastID())
	}
}

func TestBadInputNeverReachesABackend(t *testing.T) {
	p := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	d := proxytest.NewEngine(t, proxytest.JSONAnswer(200, `{}`))
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d})
	cases := []struct {
		name, method, path, body string
		status                   int
	}{
		{"not json", "POST", "/generate", `{"text":`, 400},
		{"array", "POST", "/generate", `[1,2]`, 400},
		{"string", "POST", "/generate", `"hi"`, 400},
		{"empty", "POST", "/generate", ``, 400},
		{"empty text batch", "POST", "/generate", `{"text":[]}`, 400},
		{"unknown path", "POST", "/nope", `{}`, 404},
		{"wrong method", "GET", "/generate", ``, 405},
		{"wrong method chat", "PUT", "/v1/chat/completions", `{}`, 405},
		{"rank not int", "POST", "/generate", `{"text":"x","disagg_prefill_dp_rank":"1"}`, 400},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := fasthttp.AcquireRequest()
			resp := fasthttp.AcquireResponse()
			req.SetRequestURI(l.URL + c.path)
			req.Header.SetMethod(c.method)
			req.SetBodyString(c.body)
			if err := fasthttp.DoTimeout(req, resp, 5*time.Second); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode() != c.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode(), c.status, resp.Body())
			}
			var e proxytest.ErrorBody
			if err := json.Unmarshal(resp.Body(), &e); err != nil || e.Error.Message == "" || e.Error.Code != c.status {
				t.Fatalf("not the JSON error shape: %s", resp.Body())
			}
		})
	}
	t.Run("too large", func(t *testing.T) {
		// Announce a body over limits.max_body_bytes: pdlb must refuse it
		// from the header, without reading (or waiting for) the body.
		resp, b := proxytest.RawRequest(t, l.URL, "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 2097152\r\n\r\n{\"text\":\"")
		var e proxytest.ErrorBody
		if resp.StatusCode != 413 || json.Unmarshal([]byte(b), &e) != nil || e.Error.Code != 413 {
			t.Fatalf("got %d %s", resp.StatusCode, b)
		}
	})
	if p.Count()+d.Count() != 0 {
		t.Fatalf("bad input reached the backends (%d, %d)", p.Count(), d.Count())
	}
}

// TestLargeEngineResponseHeadIsRead: a response head larger than the small
// per-connection upstream buffer (a proxy in front of the engine adding
// headers) is still read, on a fresh connection and on a reused one.
func TestLargeEngineResponseHeadIsRead(t *testing.T) {
	long := strings.Repeat("x", 6000)
	handler := func(ctx *fasthttp.RequestCtx) {
		ctx.Response.Header.Set("X-Long", long)
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"text":"ok"}`)
	}
	p := proxytest.NewEngine(t, handler)
	d := proxytest.NewEngine(t, handler)
	l := startLB(t, []*proxytest.Engine{p}, []*proxytest.Engine{d})
	for i := 0; i < 3; i++ {
		if resp, body := proxytest.Post(t, l.URL+"/generate", `{"text":"hi"}`); resp.StatusCode != 200 || body != `{"text":"ok"}` {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
	}
}
