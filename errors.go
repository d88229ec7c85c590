package pdlb

import (
	"encoding/json"
	"strconv"

	"github.com/valyala/fasthttp"
)

// Error types of pdlb's one error shape, which every listener (serving,
// admin, bootstrap registry writes) and the final SSE event of a broken
// stream use: {"error": {"message": …, "type": …, "code": …}} (OpenAI's).
const (
	ErrInvalidRequest = "invalid_request_error"
	ErrNotFound       = "not_found_error"
	ErrUpstream       = "upstream_error"
	ErrUnavailable    = "unavailable_error"
	ErrAuthentication = "authentication_error"
	ErrPermission     = "permission_error"
	ErrRateLimited    = "rate_limit_error"
)

// AppendError appends the error shape for status, type and message to dst.
func AppendError(dst []byte, status int, typ, msg string) []byte {
	dst = append(dst, `{"error":{"message":`...)
	dst = appendJSONString(dst, msg)
	dst = append(dst, `,"type":`...)
	dst = appendJSONString(dst, typ)
	dst = append(dst, `,"code":`...)
	dst = strconv.AppendInt(dst, int64(status), 10)
	return append(dst, "}}"...)
}

func appendJSONString(dst []byte, s string) []byte {
	b, err := json.Marshal(s)
	if err != nil { // cannot happen for a string
		return append(dst, `""`...)
	}
	return append(dst, b...)
}

// SetError puts the error shape into resp. Headers already set (the
// request ID, a challenge) stay; a body already set is replaced.
func SetError(resp *fasthttp.Response, status int, typ, msg string) {
	resp.ResetBody()
	resp.SetStatusCode(status)
	resp.Header.SetContentType("application/json")
	resp.SetBodyRaw(AppendError(nil, status, typ, msg))
}

// WriteError answers ctx with the error shape.
func WriteError(ctx *fasthttp.RequestCtx, status int, typ, msg string) {
	SetError(&ctx.Response, status, typ, msg)
}

// SetUnavailable answers 503 with Retry-After: the capacity may come back.
func SetUnavailable(resp *fasthttp.Response, retryAfterSeconds int, msg string) {
	SetError(resp, fasthttp.StatusServiceUnavailable, ErrUnavailable, msg)
	resp.Header.Set(fasthttp.HeaderRetryAfter, strconv.Itoa(retryAfterSeconds))
}

// WriteJSON answers ctx with v encoded as JSON (an encoding failure is a
// 500 in the error shape, never an empty body).
func WriteJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		WriteError(ctx, fasthttp.StatusInternalServerError, ErrUpstream, "encoding answer: "+err.Error())
		return
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
}
