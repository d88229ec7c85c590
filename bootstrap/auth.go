package bootstrap

import (
	"github.com/valyala/fasthttp"
)

// authorize admits a registry write (PUT and DELETE /route, POST
// /register_dp_rank) or answers 401 and returns false. Writes need
// bootstrap.auth_token when one is set; reads (GET, POST /query_dp_ranks)
// never do, because decodes cannot authenticate.
func (r *Registry) authorize(ctx *fasthttp.RequestCtx) bool {
	return r.auth.Check(ctx)
}
