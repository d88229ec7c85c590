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
	setError(&ctx.Response, status, typ, msg)
}

// setError puts pdlb's JSON error shape into resp.
func setError(resp *fasthttp.Response, status int, typ, msg string) {
	body, _ := json.Marshal(errorBody{Error: errorDetail{Message: msg, Type: typ, Code: status}})
	// ResetBody, not Reset: headers already set (X-Request-ID) stay.
	resp.ResetBody()
	resp.SetStatusCode(status)
	resp.Header.SetContentType("application/json")
	resp.SetBody(body)
}

// writeUnavailable answers 503 with Retry-After: the capacity may come back.
func writeUnavailable(ctx *fasthttp.RequestCtx, retryAfter int, msg string) {
	setUnavailable(&ctx.Response, retryAfter, msg)
}

func setUnavailable(resp *fasthttp.Response, retryAfter int, msg string) {
	setError(resp, fasthttp.StatusServiceUnavailable, errUnavailable, msg)
	resp.Header.Set("Retry-After", strconv.Itoa(retryAfter))
}
