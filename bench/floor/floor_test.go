package floor

import (
	"net"
	"pdlb/proxy/proxytest"
	"strings"
	"sync"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
)

// backend is a loopback engine that keeps the bodies it received.
type backend struct {
	url    string
	mu     sync.Mutex
	bodies []string
}

func newBackend(t testing.TB, status int, ctype, answer string) *backend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{url: "http://" + ln.Addr().String()}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		if _, ok := t.(*testing.T); ok { // benchmarks skip the bookkeeping
			b.mu.Lock()
			b.bodies = append(b.bodies, string(ctx.PostBody()))
			b.mu.Unlock()
		}
		ctx.SetStatusCode(status)
		ctx.SetContentType(ctype)
		ctx.WriteString(answer)
	}}
	go srv.Serve(ln) //nolint:errcheck // ends at Shutdown
	t.Cleanup(func() { _ = srv.Shutdown() })
	return b
}

func (b *backend) received() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.bodies...)
}

// call runs h on a request with body, as the server would, and returns the response.
func call(h fasthttp.RequestHandler, body string) *fasthttp.Response {
	var ctx fasthttp.RequestCtx
	var req fasthttp.Request
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI("/generate")
	req.Header.SetContentType("application/json")
	req.SetBodyString(body)
	ctx.Init(&req, nil, nil)
	h(&ctx)
	resp := &fasthttp.Response{}
	ctx.Response.CopyTo(resp)
	return resp
}

func TestSpliceAndFanOut(t *testing.T) {
	p := newBackend(t, 200, "application/json", `{"prefill":true}`)
	d := newBackend(t, 201, "application/x-test", `{"text":"decoded","meta_info":{"completion_tokens":3}}`)
	h := New(p.url, d.url, 8998)

	const body = ` {"text":"hi, {not a brace}","seed":9223372036854775807,"sampling_params":{"max_new_tokens":8},"stream":false}`
	resp := call(h, body)
	if resp.StatusCode() != 201 || string(resp.Header.ContentType()) != "application/x-test" ||
		string(resp.Body()) != `{"text":"decoded","meta_info":{"completion_tokens":3}}` {
		t.Fatalf("answer = %d %q %s, want the decode's", resp.StatusCode(), resp.Header.ContentType(), resp.Body())
	}
	pb, db := p.received(), d.received()
	if len(pb) != 1 || len(db) != 1 {
		t.Fatalf("prefill got %d, decode got %d requests; want 1 each", len(pb), len(db))
	}
	if pb[0] != db[0] {
		t.Errorf("prefill and decode got different bodies:\n%s\n%s", pb[0], db[0])
	}
	got := db[0]
	if !gjson.Valid(got) {
		t.Fatalf("backend got invalid JSON: %s", got)
	}
	host := strings.TrimPrefix(p.url, "http://")
	host = host[:strings.LastIndexByte(host, ':')]
	if v := gjson.Get(got, "bootstrap_host").String(); v != host {
		t.Errorf("bootstrap_host = %q, want %q", v, host)
	}
	if v := gjson.Get(got, "bootstrap_port").Raw; v != "8998" {
		t.Errorf("bootstrap_port = %s", v)
	}
	if room := gjson.Get(got, "bootstrap_room"); room.Type != gjson.Number || room.Int() < 0 {
		t.Errorf("bootstrap_room = %s", room.Raw)
	}
	// The original fields arrive byte for byte, big integers included.
	for _, key := range []string{"text", "seed", "sampling_params", "stream"} {
		if a, b := gjson.Get(body, key).Raw, gjson.Get(got, key).Raw; a != b {
			t.Errorf("%s changed: %s → %s", key, a, b)
		}
	}
	if !strings.HasSuffix(got, strings.TrimSpace(body)[1:]) {
		t.Errorf("original body not kept after the splice: %s", got)
	}
}

func TestSpliceEmptyObjectAndRejects(t *testing.T) {
	p := newBackend(t, 200, "application/json", `{}`)
	d := newBackend(t, 200, "application/json", `{}`)
	h := New(p.url, d.url, 1)
	if resp := call(h, "{ }"); resp.StatusCode() != 200 {
		t.Fatalf("status %d", resp.StatusCode())
	}
	if got := d.received()[0]; !gjson.Valid(got) || !gjson.Get(got, "bootstrap_room").Exists() {
		t.Errorf("splice into {} gave %s", got)
	}
	for _, bad := range []string{"", "[1,2]", `x{"a":1}`} {
		if resp := call(h, bad); resp.StatusCode() != 400 || !gjson.GetBytes(resp.Body(), "error.message").Exists() {
			t.Errorf("body %q: %d %s, want a 400 error", bad, resp.StatusCode(), resp.Body())
		}
	}
	if n := len(d.received()); n != 1 {
		t.Errorf("rejected bodies reached the decode: %d requests", n)
	}
}

func TestDecodeDown(t *testing.T) {
	p := newBackend(t, 200, "application/json", `{}`)
	dead := "http://" + proxytest.ClosedAddr(t)
	resp := call(New(p.url, dead, 1), `{"a":1}`)
	if resp.StatusCode() != 502 || !strings.Contains(string(resp.Body()), "decode") {
		t.Errorf("decode down: %d %s, want 502 naming the decode", resp.StatusCode(), resp.Body())
	}
}

func BenchmarkFloor(b *testing.B) {
	p := newBackend(b, 200, "application/json", `{}`)
	d := newBackend(b, 200, "application/json", `{"text":"ok","meta_info":{"completion_tokens":8}}`)
	h := New(p.url, d.url, 8998)
	body := []byte(`{"text":"` + strings.Repeat("word ", 128) + `","sampling_params":{"max_new_tokens":8},"stream":false}`)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var ctx fasthttp.RequestCtx
		var req fasthttp.Request
		req.Header.SetMethod(fasthttp.MethodPost)
		req.SetRequestURI("/generate")
		req.Header.SetContentType("application/json")
		req.SetBody(body)
		ctx.Init(&req, nil, nil)
		for pb.Next() {
			ctx.Response.Reset()
			h(&ctx)
			if ctx.Response.StatusCode() != 200 {
				b.Fatalf("status %d", ctx.Response.StatusCode())
			}
		}
	})
}
