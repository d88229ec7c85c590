package pdlb

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"

	"github.com/valyala/fasthttp"
)

// Bearer checks "Authorization: Bearer <token>" against one configured
// token (server.api_key, admin.api_key, bootstrap.auth_token): the scheme
// is case-insensitive (RFC 7235 §2.1) and the token is compared as SHA-256
// digests, so the comparison takes the same time whatever the token sent
// (subtle.ConstantTimeCompare alone returns early on a length mismatch).
// The zero Bearer, or one made from "", admits every request.
type Bearer struct {
	key    string // the config key named in refusals
	set    bool
	digest [sha256.Size]byte
}

// NewBearer returns the check for token; key is the config key that holds
// it ("server.api_key"), named in the 401 answer.
func NewBearer(key, token string) Bearer {
	b := Bearer{key: key}
	if token != "" {
		b.set, b.digest = true, sha256.Sum256([]byte(token))
	}
	return b
}

// Enabled reports whether a token is required.
func (b Bearer) Enabled() bool { return b.set }

// Allows reports whether an Authorization header value carries the token.
func (b Bearer) Allows(authorization []byte) bool {
	if !b.set {
		return true
	}
	token, ok := bearerToken(authorization)
	if !ok {
		return false
	}
	got := sha256.Sum256(token)
	return subtle.ConstantTimeCompare(got[:], b.digest[:]) == 1
}

// bearerToken extracts the credentials of a Bearer Authorization value:
// the scheme in any case, one or more spaces, the token; surrounding
// whitespace is ignored.
func bearerToken(h []byte) ([]byte, bool) {
	h = bytes.TrimSpace(h)
	const scheme = "bearer"
	if len(h) <= len(scheme) || !bytes.EqualFold(h[:len(scheme)], []byte(scheme)) || (h[len(scheme)] != ' ' && h[len(scheme)] != '\t') {
		return nil, false
	}
	token := bytes.TrimLeft(h[len(scheme):], " \t")
	return token, len(token) > 0
}

// Check admits ctx or answers 401 with a challenge naming the config key
// whose token is missing, and returns false.
func (b Bearer) Check(ctx *fasthttp.RequestCtx) bool {
	if b.Allows(ctx.Request.Header.Peek(fasthttp.HeaderAuthorization)) {
		return true
	}
	ctx.Response.Header.Set(fasthttp.HeaderWWWAuthenticate, `Bearer realm="pdlb"`)
	WriteError(ctx, fasthttp.StatusUnauthorized, ErrAuthentication,
		"missing or wrong token: send Authorization: Bearer <"+b.key+">")
	return false
}
