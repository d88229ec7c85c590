package mock

import (
	"bytes"
	"crypto/subtle"

	"github.com/valyala/fasthttp"
)

// authorized applies SGLang's API-key rules (srt/utils/auth.py) to a
// request for route: /health* is open (as /metrics is in SGLang; the mock
// serves none); the admin routes
// pdlb calls (/flush_cache, /abort_request: AuthLevel.ADMIN_OPTIONAL)
// need the admin key when one is set, else the api key; every other route
// needs the api key when one is set. A refusal is SGLang's 401
// {"error": "Unauthorized"}.
func (e *Engine) authorized(ctx *fasthttp.RequestCtx, route int) bool {
	api, admin := e.opts.APIKey, e.opts.AdminAPIKey
	if api == "" && admin == "" || bytes.HasPrefix(ctx.Path(), []byte("/health")) {
		return true
	}
	want := api
	if route == 11 || route == 12 { // /flush_cache, /abort_request
		if admin != "" {
			want = admin
		}
	}
	if want == "" || bearerIs(ctx.Request.Header.Peek(fasthttp.HeaderAuthorization), want) {
		return true
	}
	e.unauthorized.Add(1)
	ctx.SetStatusCode(fasthttp.StatusUnauthorized)
	ctx.SetContentType("application/json")
	ctx.SetBodyString(`{"error":"Unauthorized"}`)
	return false
}

// bearerIs reports whether h is "Bearer <key>" (the scheme in any case, one
// space), compared in constant time as SGLang does: stricter than pdlb's own
// pdlb.Bearer, which also takes tabs and extra spaces.
func bearerIs(h []byte, key string) bool {
	const scheme = "bearer "
	if len(h) < len(scheme) || !bytes.EqualFold(h[:len(scheme)], []byte(scheme)) {
		return false
	}
	return subtle.ConstantTimeCompare(h[len(scheme):], []byte(key)) == 1
}

// Unauthorized counts the requests refused for their credentials.
func (e *Engine) Unauthorized() int64 { return e.unauthorized.Load() }
