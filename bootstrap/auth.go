package bootstrap

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"

	"github.com/valyala/fasthttp"
)

// authenticator guards registry writes. Tokens are compared as SHA-256
// digests so the comparison is constant-time in the token's length too
// (subtle.ConstantTimeCompare returns early on a length mismatch).
//
// Stock SGLang engines send no Authorization header: a token only works
// with registrants that send it (pdlb's Registrar and mock engines, or a
// sidecar). Reads (GET, POST /query_dp_ranks) stay open because decodes
// cannot authenticate either.
type authenticator struct {
	enabled bool
	digest  [sha256.Size]byte
}

func newAuthenticator(token string) authenticator {
	if token == "" {
		return authenticator{}
	}
	return authenticator{enabled: true, digest: sha256.Sum256([]byte(token))}
}

var bearerPrefix = []byte("bearer ")

// allow checks an Authorization header value; fails closed.
func (a authenticator) allow(header []byte) bool {
	if !a.enabled {
		return true
	}
	if len(header) <= len(bearerPrefix) || !bytes.EqualFold(header[:len(bearerPrefix)], bearerPrefix) {
		return false
	}
	got := sha256.Sum256(bytes.TrimSpace(header[len(bearerPrefix):]))
	return subtle.ConstantTimeCompare(got[:], a.digest[:]) == 1
}

// authorize answers 401 and returns false when a write lacks the token.
func (r *Registry) authorize(ctx *fasthttp.RequestCtx) bool {
	if r.auth.allow(ctx.Request.Header.Peek(fasthttp.HeaderAuthorization)) {
		return true
	}
	ctx.Response.Header.Set(fasthttp.HeaderWWWAuthenticate, `Bearer realm="pdlb-bootstrap"`)
	jsonReply(ctx, fasthttp.StatusUnauthorized,
		[]byte(`{"error":{"message":"bootstrap registry writes need Authorization: Bearer <bootstrap.auth_token>","type":"unauthorized","code":401}}`))
	return false
}
