package mock

import (
	"github.com/valyala/fasthttp"
)

// Routes the mock serves.
const (
	pathGenerate       = "/generate"
	pathChat           = "/v1/chat/completions"
	pathCompletions    = "/v1/completions"
	pathHealth         = "/health"
	pathHealthGenerate = "/health_generate"
	pathServerInfo     = "/server_info"
	pathGetServerInfo  = "/get_server_info"
	pathModelInfo      = "/model_info"
	pathGetModelInfo   = "/get_model_info"
	pathModels         = "/v1/models"
	pathFlushCache     = "/flush_cache"
	pathAbort          = "/abort_request"
	pathLoads          = "/v1/loads"
	pathGetLoad        = "/get_load"
)

// routeIndex numbers the routes for lock-free counters; 0 is "unknown".
var routePaths = [...]string{
	"(unknown)", pathGenerate, pathChat, pathCompletions, pathHealth, pathHealthGenerate,
	pathServerInfo, pathGetServerInfo, pathModelInfo, pathGetModelInfo, pathModels,
	pathFlushCache, pathAbort, pathLoads, pathGetLoad,
}

// Handler serves one request; it is the engine's whole HTTP surface.
func (e *Engine) Handler(ctx *fasthttp.RequestCtx) {
	path := ctx.Path()
	route := 0
	// string(path) in a switch does not allocate.
	switch string(path) {
	case pathGenerate:
		route = 1
	case pathChat:
		route = 2
	case pathCompletions:
		route = 3
	case pathHealth:
		route = 4
	case pathHealthGenerate:
		route = 5
	case pathServerInfo:
		route = 6
	case pathGetServerInfo:
		route = 7
	case pathModelInfo:
		route = 8
	case pathGetModelInfo:
		route = 9
	case pathModels:
		route = 10
	case pathFlushCache:
		route = 11
	case pathAbort:
		route = 12
	case pathLoads:
		route = 13
	case pathGetLoad:
		route = 14
	}
	if !e.authorized(ctx, route) {
		return
	}
	e.stats.count(route)
	if ctx.IsPost() || ctx.IsPut() {
		e.stats.record(route, path, ctx.PostBody())
	}
	get, post := ctx.IsGet(), ctx.IsPost()
	switch route {
	case 1:
		// SGLang's /generate accepts POST and PUT.
		if !post && !ctx.IsPut() {
			methodNotAllowed(ctx)
			return
		}
		e.serveGenerate(ctx)
	case 2, 3:
		if !post {
			methodNotAllowed(ctx)
			return
		}
		e.serveOpenAI(ctx, routePaths[route])
	case 4, 5:
		// /health_generate was POST in the mini LB before 2025-09-04; accept both.
		if !get && !(route == 5 && post) {
			methodNotAllowed(ctx)
			return
		}
		e.serveHealth(ctx)
	case 6, 7:
		if !get {
			methodNotAllowed(ctx)
			return
		}
		e.serveServerInfo(ctx)
	case 8, 9:
		if !get {
			methodNotAllowed(ctx)
			return
		}
		e.serveModelInfo(ctx)
	case 10:
		if !get {
			methodNotAllowed(ctx)
			return
		}
		e.serveModels(ctx)
	case 11:
		if !get && !post {
			methodNotAllowed(ctx)
			return
		}
		e.serveFlushCache(ctx)
	case 12:
		if !post {
			methodNotAllowed(ctx)
			return
		}
		e.serveAbort(ctx)
	case 13, 14:
		if !get {
			methodNotAllowed(ctx)
			return
		}
		if route == 13 {
			e.serveLoads(ctx)
		} else {
			e.serveGetLoad(ctx)
		}
	default:
		// FastAPI's answers for unknown paths and methods.
		ctx.SetStatusCode(fasthttp.StatusNotFound)
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"detail":"Not Found"}`)
	}
}

func methodNotAllowed(ctx *fasthttp.RequestCtx) {
	ctx.SetStatusCode(fasthttp.StatusMethodNotAllowed)
	ctx.SetContentType("application/json")
	ctx.SetBodyString(`{"detail":"Method Not Allowed"}`)
}

// writeJSON answers status with a JSON body.
func writeJSON(ctx *fasthttp.RequestCtx, status int, body []byte) {
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
}

// nativeError is SGLang's error body on native routes (/generate):
// {"error": {"message", "type", "code"}}.
func nativeError(message, typ string, code int) []byte {
	b := append([]byte(nil), `{"error":{"message":`...)
	b = appendString(b, message)
	b = append(b, `,"type":`...)
	b = appendString(b, typ)
	b = append(b, `,"code":`...)
	b = appendInt(b, int64(code))
	return append(b, "}}"...)
}

// streamError is SGLang's in-stream error event payload (it adds retryable).
func streamError(message, typ string, code int) []byte {
	b := append([]byte(nil), `{"error":{"message":`...)
	b = appendString(b, message)
	b = append(b, `,"type":`...)
	b = appendString(b, typ)
	b = append(b, `,"code":`...)
	b = appendInt(b, int64(code))
	return append(b, `,"retryable":false}}`...)
}

// openAIError is SGLang's OpenAI ErrorResponse:
// {"object":"error","message","type","param":null,"code"}.
func openAIError(message, typ string, code int) []byte {
	b := append([]byte(nil), `{"object":"error","message":`...)
	b = appendString(b, message)
	b = append(b, `,"type":`...)
	b = appendString(b, typ)
	b = append(b, `,"param":null,"code":`...)
	b = appendInt(b, int64(code))
	return append(b, '}')
}

// missingRoomMessage is SGLang's abort message for a PD request without a room.
func missingRoomMessage(rid string) string {
	return "Invalid request: Disaggregated request received without bootstrap room id. req.rid='" + rid + "'"
}
