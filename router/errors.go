package router

import (
	"encoding/json"
	"strconv"

	"github.com/valyala/fasthttp"
)

// Error types in the OpenAI-style error shape every pdlb error uses:
// {"error": {"message": …, "type": …, "code": …}}.
const (
	errInvalidRequest = "invalid_request_error"
	errNotFound       = "not_found_error"
	errUpstream       = "upstream_error"
	errUnavailable    = "unavailable_error"
	errAuth           = "authentication_error"
	errRateLimited    = "rate_limit_error"
)

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    int    `json:"code"`
}

// writeError answers with pdlb's JSON error shape.
func writeError(ctx *fasthttp.RequestCtx, status int, typ, msg string) {
	body, _ := json.Marshal(errorBody{Error: errorDetail{Message: msg, Type: typ, Code: status}})
	// ResetBody, not Reset: headers already set (X-Request-ID) stay.
	ctx.Response.ResetBody()
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
}

// writeUnavailable answers 503 with Retry-After: the capacity may come back.
func writeUnavailable(ctx *fasthttp.RequestCtx, retryAfter int, msg string) {
	writeError(ctx, fasthttp.StatusServiceUnavailable, errUnavailable, msg)
	ctx.Response.Header.Set("Retry-After", strconv.Itoa(retryAfter))
}
