// Package floor is the bare fan-out proxy pdlb is measured against: it splices the
// bootstrap fields into the body without parsing it, sends the body to one prefill and one
// decode at once and answers with the decode's reply. No logging, metrics, retries or
// streaming: its CPU per request is the floor any PD balancer built on fasthttp pays.
package floor

import (
	"bytes"
	"math/rand/v2"
	"net"
	"net/url"
	"strconv"
	"sync"

	"github.com/valyala/fasthttp"
)

// New returns the handler proxying to prefillURL and decodeURL (http://host:port). The
// bootstrap host is the prefill's host; rooms are random non-negative int64s. It panics
// on a malformed URL: a fixture's configuration error should stop the benchmark at once.
func New(prefillURL, decodeURL string, bootstrapPort int) fasthttp.RequestHandler {
	p, phost := client(prefillURL)
	d, _ := client(decodeURL)
	prefix := []byte(`"bootstrap_host":` + strconv.Quote(phost) +
		`,"bootstrap_port":` + strconv.Itoa(bootstrapPort) + `,"bootstrap_room":`)
	return func(ctx *fasthttp.RequestCtx) {
		body := ctx.PostBody()
		open := bytes.IndexByte(body, '{')
		if open < 0 || len(bytes.TrimSpace(body[:open])) > 0 {
			fail(ctx, fasthttp.StatusBadRequest, "body must be a JSON object")
			return
		}
		preq, dreq := fasthttp.AcquireRequest(), fasthttp.AcquireRequest()
		presp, dresp := fasthttp.AcquireResponse(), fasthttp.AcquireResponse()
		defer func() {
			fasthttp.ReleaseRequest(preq)
			fasthttp.ReleaseRequest(dreq)
			fasthttp.ReleaseResponse(presp)
			fasthttp.ReleaseResponse(dresp)
		}()

		preq.Header.SetMethodBytes(ctx.Method())
		preq.SetRequestURIBytes(ctx.RequestURI())
		preq.Header.SetContentTypeBytes(ctx.Request.Header.ContentType())
		preq.AppendBody(body[:open+1])
		preq.AppendBody(prefix)
		var num [20]byte
		preq.AppendBody(strconv.AppendInt(num[:0], int64(rand.Uint64()>>1), 10))
		if rest := bytes.TrimLeft(body[open+1:], " \t\r\n"); len(rest) == 0 || rest[0] != '}' {
			preq.AppendBody([]byte{','}) // no comma before the closing brace of "{}"
		}
		preq.AppendBody(body[open+1:])
		preq.CopyTo(dreq)
		preq.Header.SetHost(p.Addr)
		dreq.Header.SetHost(d.Addr)

		var wg sync.WaitGroup
		wg.Go(func() { _ = p.Do(preq, presp) })
		err := d.Do(dreq, dresp)
		wg.Wait()
		if err != nil {
			fail(ctx, fasthttp.StatusBadGateway, "decode "+d.Addr+": "+err.Error())
			return
		}
		ctx.SetStatusCode(dresp.StatusCode())
		ctx.SetContentTypeBytes(dresp.Header.ContentType())
		ctx.SetBody(dresp.Body())
	}
}

// fail answers in pdlb's one error shape.
func fail(ctx *fasthttp.RequestCtx, code int, msg string) {
	ctx.SetStatusCode(code)
	ctx.SetContentType("application/json")
	ctx.SetBodyString(`{"error":{"message":` + strconv.Quote(msg) + `,"type":"floor_error","code":` + strconv.Itoa(code) + `}}`)
}

// ListenAndServe serves h on addr with fasthttp's defaults.
func ListenAndServe(addr string, h fasthttp.RequestHandler) error {
	return (&fasthttp.Server{Handler: h, NoDefaultServerHeader: true}).ListenAndServe(addr)
}

// client builds a keep-alive pool for base and returns it with base's host name.
func client(base string) (*fasthttp.HostClient, string) {
	u, err := url.Parse(base)
	if err != nil || u.Host == "" {
		panic("floor: bad backend URL " + strconv.Quote(base))
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	return &fasthttp.HostClient{
		Addr:                      addr,
		IsTLS:                     u.Scheme == "https",
		DialDualStack:             true,
		MaxConns:                  16384,
		MaxIdemponentCallAttempts: 1,
		NoDefaultUserAgentHeader:  true,
	}, u.Hostname()
}
