package load

import (
	"bufio"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
)

// serve runs h on a loopback port for the test's lifetime and returns its base URL.
func serve(t *testing.T, h fasthttp.RequestHandler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: h, CloseOnShutdown: true}
	go srv.Serve(ln) //nolint:errcheck // ends at Shutdown
	t.Cleanup(func() { _ = srv.Shutdown() })
	return "http://" + ln.Addr().String()
}

// maxTokens reads the requested output length from any of the three body shapes.
func maxTokens(body []byte) int {
	r := gjson.GetManyBytes(body, "sampling_params.max_new_tokens", "max_tokens")
	if r[0].Exists() {
		return int(r[0].Int())
	}
	return int(r[1].Int())
}

// engine answers like SGLang's /generate: non-streaming JSON with meta_info, or SSE
// events spaced by delay (one token each) ending in data: [DONE].
func engine(delay time.Duration) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		body := ctx.PostBody()
		n := maxTokens(body)
		if !gjson.GetBytes(body, "stream").Bool() {
			ctx.SetContentType("application/json")
			fmt.Fprintf(ctx, `{"text":"ok","meta_info":{"id":"x","prompt_tokens":3,"completion_tokens":%d}}`, n)
			return
		}
		ctx.SetContentType("text/event-stream")
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			for i := 1; i <= n; i++ {
				if i > 1 {
					time.Sleep(delay)
				}
				fmt.Fprintf(w, "data: {\"text\":\"t%d\",\"meta_info\":{\"completion_tokens\":%d}}\n\n", i, i)
				if w.Flush() != nil {
					return
				}
			}
			w.WriteString("data: [DONE]\n\n")
			w.Flush()
		})
	}
}
