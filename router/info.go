package router

import (
	"bytes"
	"encoding/json"
	"strconv"
	"sync"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"pdlb"
	"pdlb/proxy"
)

// infoTimeout bounds the info and broadcast routes (SGLang's balancer
// leaves them at aiohttp's 300 s default; an operator's curl should not hang).
const infoTimeout = 30 * time.Second

// health answers 200 while pdlb runs, without touching a backend.
func (r *Router) health(ctx *fasthttp.RequestCtx) {
	ctx.SetStatusCode(fasthttp.StatusOK)
}

// backendResult is one backend's part of a broadcast answer.
type backendResult struct {
	Role   string          `json:"role"`
	URL    string          `json:"url"`
	Status int             `json:"status,omitempty"`
	OK     bool            `json:"ok"`
	Body   json.RawMessage `json:"body,omitempty"`
	Error  string          `json:"error,omitempty"`
}

// broadcast sends the request to every prefill and decode at once and
// answers with each backend's result: 200 when all succeeded, 502 otherwise.
func (r *Router) broadcast(method, path string) fasthttp.RequestHandler {
	return r.broadcastWith(method, path, (*proxy.Backend).Call)
}

// AdminBroadcast is broadcast with upstream_auth's admin key, for pdlb's
// admin listener (admin.api_key guards it): an operator's /flush_cache
// reaches engines that keep their admin routes to --admin-api-key holders.
func (r *Router) AdminBroadcast(method, path string) fasthttp.RequestHandler {
	return r.broadcastWith(method, path, (*proxy.Backend).CallAsAdmin)
}

type callFunc func(b *proxy.Backend, method, path string, body []byte, timeout time.Duration) (proxy.CallResult, error)

func (r *Router) broadcastWith(method, path string, call callFunc) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		var body []byte
		if method == fasthttp.MethodPost {
			body = ctx.PostBody()
			if len(body) == 0 {
				body = nil
			}
		}
		results := r.callAll(method, path, body, call)
		status := fasthttp.StatusOK
		for _, res := range results {
			if !res.OK {
				status = fasthttp.StatusBadGateway
			}
		}
		pdlb.WriteJSON(ctx, status, map[string]any{"results": results})
	}
}

func (r *Router) callAll(method, path string, body []byte, call callFunc) []backendResult {
	backends := append(append([]*proxy.Backend(nil), r.pool.Backends(proxy.Prefill)...), r.pool.Backends(proxy.Decode)...)
	results := make([]backendResult, len(backends))
	var wg sync.WaitGroup
	for i, b := range backends {
		wg.Go(func() {
			res := backendResult{Role: b.Role.String(), URL: b.URL}
			out, err := call(b, method, path, body, infoTimeout)
			switch {
			case err != nil:
				res.Error = err.Error()
			default:
				res.Status, res.OK = out.Status, out.Status >= 200 && out.Status < 300
				if len(out.Body) > 0 && gjson.ValidBytes(out.Body) {
					res.Body = out.Body
				} else if len(out.Body) > 0 {
					res.Body, _ = json.Marshal(string(capBody(out.Body)))
				}
			}
			results[i] = res
		})
	}
	wg.Wait()
	return results
}

func capBody(b []byte) []byte {
	if len(b) > 2048 {
		return b[:2048]
	}
	return b
}

// fromFirstPrefill relays a GET from the first available prefill.
func (r *Router) fromFirstPrefill(path string) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		var chosen *proxy.Backend
		for _, b := range r.pool.Backends(proxy.Prefill) {
			if r.pool.Available(b) {
				chosen = b
				break
			}
		}
		if chosen == nil {
			pdlb.SetUnavailable(&ctx.Response, 1, "no prefill backend available to answer "+path)
			return
		}
		out, err := chosen.Call(fasthttp.MethodGet, path, nil, infoTimeout)
		if err != nil {
			pdlb.SetUnavailable(&ctx.Response, 1, "failed to get "+path+" from "+chosen.URL+": "+err.Error())
			return
		}
		if out.Status != fasthttp.StatusOK {
			pdlb.WriteError(ctx, fasthttp.StatusBadGateway, pdlb.ErrUpstream, "prefill "+chosen.URL+" answered "+
				strconv.Itoa(out.Status)+" to "+path+": "+string(capBody(out.Body)))
			return
		}
		ctx.SetStatusCode(fasthttp.StatusOK)
		ctx.SetContentTypeBytes(out.ContentType)
		ctx.SetBody(out.Body)
	}
}

// serverInfo aggregates every backend's /server_info as SGLang's balancer
// does: {"internal_states": [decode states…], "prefill": […], "decode": […]},
// the engines' credentials nulled (redact.go).
// Engines older than 2026-04 only know /get_server_info; it is tried on 404.
func (r *Router) serverInfo(ctx *fasthttp.RequestCtx) {
	results := r.callAll(fasthttp.MethodGet, "/server_info", nil, (*proxy.Backend).Call)
	for i, res := range results {
		if res.Status == fasthttp.StatusNotFound {
			b := r.pool.Find(res.URL)
			if b == nil {
				continue
			}
			if out, err := b.Call(fasthttp.MethodGet, "/get_server_info", nil, infoTimeout); err == nil && gjson.ValidBytes(out.Body) {
				results[i].Status, results[i].OK, results[i].Body = out.Status, out.Status == 200, out.Body
			}
		}
	}
	prefill, decode := []json.RawMessage{}, []json.RawMessage{}
	var states bytes.Buffer
	for _, res := range results {
		body := json.RawMessage(redactServerInfo(res.Body))
		if !res.OK || body == nil {
			msg := res.Error
			if msg == "" {
				msg = "status " + strconv.Itoa(res.Status)
			}
			body, _ = json.Marshal(map[string]string{"url": res.URL, "error": msg})
		}
		if res.Role == proxy.Prefill.String() {
			prefill = append(prefill, body)
			continue
		}
		decode = append(decode, body)
		if res.OK {
			gjson.GetBytes(res.Body, "internal_states").ForEach(func(_, v gjson.Result) bool {
				if states.Len() > 0 {
					states.WriteByte(',')
				}
				states.WriteString(v.Raw)
				return true
			})
		}
	}
	internal := json.RawMessage(`[{"last_gen_throughput":0.0,"avg_spec_accept_length":null}]`)
	if states.Len() > 0 {
		internal = json.RawMessage("[" + states.String() + "]")
	}
	pdlb.WriteJSON(ctx, fasthttp.StatusOK, map[string]any{"internal_states": internal, "prefill": prefill, "decode": decode})
}
