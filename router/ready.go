package router

import (
	"strings"

	"github.com/valyala/fasthttp"

	"pdlb"
	"pdlb/proxy"
)

// liveness answers 200 while the process serves (for a kubelet's liveness probe).
func (r *Router) liveness(ctx *fasthttp.RequestCtx) {
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType("application/json")
	ctx.SetBodyString(`{"status":"alive"}`)
}

// readiness answers 200 only when a request could be served now: at least
// one available decode and one available prefill whose registry namespace
// is ready (a PD router that says "ready" while its first prefill is still
// registering sends traffic into a wall), and pdlb is not draining.
func (r *Router) readiness(ctx *fasthttp.RequestCtx) {
	var missing []string
	if r.draining.Load() {
		missing = append(missing, "pdlb is shutting down")
	}
	for _, role := range []proxy.Role{proxy.Prefill, proxy.Decode} {
		all := r.pool.Backends(role)
		n := 0
		for _, b := range all {
			if r.pool.Available(b) {
				n++
			}
		}
		if n == 0 {
			missing = append(missing, noBackendMessage(role, len(all)))
		}
	}
	if len(missing) > 0 {
		pdlb.SetUnavailable(&ctx.Response, 1, "not ready: "+strings.Join(missing, "; "))
		return
	}
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType("application/json")
	ctx.SetBodyString(`{"status":"ready"}`)
}
