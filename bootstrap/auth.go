package bootstrap

import (
	"github.com/valyala/fasthttp"
)

// authorize admits a registry write (PUT and DELETE /route, POST
// /register_dp_rank) or answers 401 and returns false. Writes need
// bootstrap.auth_token when one is set; reads (GET, POST /query_dp_ranks)
// never do, because decodes cannot authenticate.
//
// Released SGLang engines send no Authorization header: a token only works
// with registrants that send it (pdlb's Registrar and mock engines, or a
// sidecar). SGLang PR #39416 (unmerged in September 2026) would send
// "Authorization: Bearer <SGLANG_DISAGGREGATION_BOOTSTRAP_AUTH_TOKEN>".
func (r *Registry) authorize(ctx *fasthttp.RequestCtx) bool {
	return r.auth.Check(ctx)
}
