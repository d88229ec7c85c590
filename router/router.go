package router

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"pdlb/config"
	"pdlb/proxy"
)

// Settings are the parts of the config the request path reads; they are
// swapped atomically on reload.
type Settings struct {
	Limits  config.Limits
	Retry   config.Retry
	Server  config.Server
	Timeout config.Timeouts
	// AdvertiseHost, when set (embedded registry), is injected as
	// bootstrap_host instead of the prefill's own host.
	AdvertiseHost string
	// InfoWait bounds the slow path that waits for a prefill's parallel info.
	InfoWait time.Duration
}

// Router holds everything the handlers need; cmd/pdlb builds one.
type Router struct {
	settings atomic.Pointer[Settings]
	pool     *proxy.Pool
	proxy    *proxy.Proxy
	selector Selector
	info     InfoSource
	metrics  *Metrics
	// admission caps requests in flight (limits.max_concurrent_requests).
	admission *Admission
	log       zerolog.Logger
	now       func() time.Time
	started   time.Time
	table     map[string]route
	draining  atomic.Bool
	// streams counts relays running on hijacked connections, which
	// fasthttp's Shutdown does not wait for.
	streams sync.WaitGroup
}

// Options wire a Router.
type Options struct {
	Settings Settings
	Pool     *proxy.Pool
	Proxy    *proxy.Proxy
	// Selector defaults to RandomSelector.
	Selector Selector
	// Info answers DP-rank questions about prefills; nil disables rank checks.
	Info InfoSource
	// Metrics records request series; nil disables them.
	Metrics *Metrics
	// Admission defaults to no cap.
	Admission *Admission
	Log       zerolog.Logger
}

// New builds a Router.
func New(o Options) *Router {
	r := &Router{pool: o.Pool, proxy: o.Proxy, selector: o.Selector, info: o.Info, metrics: o.Metrics, admission: o.Admission, log: o.Log, now: time.Now}
	if r.admission == nil {
		r.admission = NewAdmission(0, 0, 0)
	}
	if r.selector == nil {
		r.selector = RandomSelector{}
	}
	r.started = r.now()
	r.SetSettings(o.Settings)
	r.table = r.buildRoutes()
	return r
}

// SetSettings swaps the settings (hot reload).
func (r *Router) SetSettings(s Settings) { r.settings.Store(&s) }

func (r *Router) cfg() *Settings { return r.settings.Load() }

// route is one entry of the route table.
type route struct {
	method  string
	handler fasthttp.RequestHandler
	// pd routes record their metrics themselves (streams end after the handler).
	pd bool
	// open routes need no API key (probes, metrics).
	open bool
}

// Handler is the fasthttp entry point: route table, method check, dispatch.
func (r *Router) Handler(ctx *fasthttp.RequestCtx) {
	path := b2s(ctx.Path())
	rt, ok := r.table[path]
	if !ok {
		writeError(ctx, fasthttp.StatusNotFound, errNotFound, "no route for "+path)
		return
	}
	m := b2s(ctx.Method())
	if m != rt.method && !(rt.method == fasthttp.MethodGet && m == fasthttp.MethodHead) {
		ctx.Response.Header.Set("Allow", rt.method)
		writeError(ctx, fasthttp.StatusMethodNotAllowed, errInvalidRequest, "method "+m+" not allowed on "+path+"; use "+rt.method)
		return
	}
	if !rt.open && !authorized(ctx, r.cfg().Server.APIKey) {
		writeError(ctx, fasthttp.StatusUnauthorized, errAuth, "missing or wrong API key: send Authorization: Bearer <server.api_key>")
		ctx.Response.Header.Set("WWW-Authenticate", "Bearer")
		return
	}
	if rt.pd {
		rt.handler(ctx) // records its own metrics when it finishes
		return
	}
	start := r.now()
	rt.handler(ctx)
	r.metrics.Request(path, ctx.Response.StatusCode(), r.now().Sub(start))
}

// Handle adds a route (metrics, readiness, …) before the server starts.
func (r *Router) Handle(method, path string, h fasthttp.RequestHandler) {
	r.table[path] = route{method: method, handler: h, open: true}
}

func (r *Router) buildRoutes() map[string]route {
	post, get := fasthttp.MethodPost, fasthttp.MethodGet
	t := map[string]route{
		"/generate":            {post, r.pdHandler("/generate", true), true, false},
		"/v1/chat/completions": {post, r.pdHandler("/v1/chat/completions", false), true, false},
		"/v1/completions":      {post, r.pdHandler("/v1/completions", false), true, false},
		"/health":              {get, r.health, false, true},
		"/liveness":            {get, r.liveness, false, true},
		"/readiness":           {get, r.readiness, false, true},
		"/health_generate":     {get, r.broadcast(get, "/health_generate"), false, false},
		"/flush_cache":         {post, r.broadcast(post, "/flush_cache"), false, false},
		"/v1/models":           {get, r.fromFirstPrefill("/v1/models"), false, false},
		"/model_info":          {get, r.fromFirstPrefill("/model_info"), false, false},
		"/get_model_info":      {get, r.fromFirstPrefill("/model_info"), false, false},
		"/server_info":         {get, r.serverInfo, false, false},
		"/get_server_info":     {get, r.serverInfo, false, false},
	}
	return t
}

// WaitStreams waits for relayed streams to end, or for done to close.
func (r *Router) WaitStreams(done <-chan struct{}) bool {
	ended := make(chan struct{})
	go func() { r.streams.Wait(); close(ended) }()
	select {
	case <-ended:
		return true
	case <-done:
		return false
	}
}
