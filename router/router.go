package router

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/trace"

	"pdlb"
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
	// InfoWait bounds the slow path that waits for a prefill's parallel info.
	InfoWait time.Duration
	// Policy names the selection policies of both roles.
	Policy config.Policy
	// Pairs is when a failing prefill–decode pair is avoided.
	Pairs PairRule
}

// Router serves the client-facing routes; cmd/pdlb/service builds one.
type Router struct {
	settings atomic.Pointer[liveSettings]
	pool     *proxy.Pool
	proxy    *proxy.Proxy
	// policies are the prefill and decode selection policies in force.
	policies atomic.Pointer[policies]
	info     InfoSource
	metrics  *Metrics
	// admission caps requests in flight (limits.max_concurrent_requests).
	admission *Admission
	log       zerolog.Logger
	clock     pdlb.Clock
	table     map[string]route
	server    *fasthttp.Server
	draining  atomic.Bool
	// stopping ends at Shutdown: waits between retries end with it.
	stopping context.Context
	stop     context.CancelFunc
	// tracer traces requests; nil when tracing is off.
	tracer trace.Tracer
	// streams counts relays running on hijacked connections, which
	// fasthttp's Shutdown does not wait for; activeStreams is the same
	// count as a number (pdlb_streams_active).
	streams       sync.WaitGroup
	activeStreams atomic.Int64
	// errors keeps the last failed requests for the status page.
	errors recentErrors
	// pairs avoids prefill–decode pairs whose pairing keeps failing.
	pairs *pairHealth
}

// Options wire a Router.
type Options struct {
	Settings Settings
	Pool     *proxy.Pool
	// Info answers DP-rank questions about prefills; nil disables rank checks.
	Info InfoSource
	// Metrics records request series; nil disables them.
	Metrics *Metrics
	Log     zerolog.Logger
	// Clock is the request path's time source; zero fields are the system's.
	Clock pdlb.Clock
	// Tracer traces requests (tracing.*); nil leaves tracing off and the
	// request path free of it.
	Tracer trace.Tracer
}

// New builds a Router, its proxy and its admission gate from o.Settings.
func New(o Options) *Router {
	r := &Router{pool: o.Pool, info: o.Info, metrics: o.Metrics, log: o.Log, clock: o.Clock.OrSystem(), tracer: o.Tracer}
	r.stopping, r.stop = context.WithCancel(context.Background())
	r.policies.Store(newPolicies(o.Settings.Policy))
	r.pairs = newPairHealth(o.Settings.Pairs, r.clock.Now)
	lim := o.Settings.Limits
	r.admission = NewAdmission(lim.MaxConcurrentRequests, lim.QueueSize, lim.QueueTimeout)
	r.proxy = proxy.New(o.Settings.Timeout, o.Log)
	if o.Metrics != nil {
		r.proxy.SetObserver(o.Metrics) // per-backend request and TTFT series
	}
	r.settings.Store(newLiveSettings(o.Settings))
	r.table = r.buildRoutes()
	r.server = r.newServer()
	r.metrics.observeAdmission(r.admission)
	r.metrics.observeStreams(&r.activeStreams)
	r.metrics.observePairs(r.pairs)
	return r
}

// AvoidedPairs lists the prefill–decode pairs avoided now (GET /workers).
func (r *Router) AvoidedPairs() []AvoidedPair { return r.pairs.Avoided() }

// Admission is the admission gate (limits.max_concurrent_requests).
func (r *Router) Admission() *Admission { return r.admission }

// ActiveStreams is the number of streamed answers being relayed.
func (r *Router) ActiveStreams() int64 { return r.activeStreams.Load() }

// Apply puts what a reload changes into force for new requests: settings,
// leg timeouts and admission limits. Requests in flight keep theirs.
func (r *Router) Apply(s Settings) {
	if s.Policy != r.cfg().Policy {
		r.policies.Store(newPolicies(s.Policy)) // a policy's learnt state starts afresh
	}
	r.settings.Store(newLiveSettings(s))
	r.pairs.setRule(s.Pairs)
	r.proxy.SetTimeouts(s.Timeout)
	r.admission.SetLimits(s.Limits.MaxConcurrentRequests, s.Limits.QueueSize, s.Limits.QueueTimeout)
}

// liveSettings are the settings in force with what is derived from them.
type liveSettings struct {
	Settings
	// auth checks server.api_key.
	auth pdlb.Bearer
}

func newLiveSettings(s Settings) *liveSettings {
	return &liveSettings{Settings: s, auth: pdlb.NewBearer("server.api_key", s.Server.APIKey)}
}

func (r *Router) cfg() *liveSettings { return r.settings.Load() }

// Settings returns the settings in force.
func (r *Router) Settings() Settings { return r.cfg().Settings }

// SettingsFrom picks the request path's settings out of a config.
func SettingsFrom(cfg *config.Config) Settings {
	return Settings{Limits: cfg.Limits, Retry: cfg.Retry, Server: cfg.Server, Timeout: cfg.Timeouts, InfoWait: cfg.Bootstrap.InfoWait, Policy: cfg.Policy,
		Pairs: PairRule{Failures: cfg.Breaker.PairFailures, Window: cfg.Breaker.PairWindow, Cooldown: cfg.Breaker.PairCooldown}}
}

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
		pdlb.WriteError(ctx, fasthttp.StatusNotFound, pdlb.ErrNotFound, "no route for "+path)
		return
	}
	m := b2s(ctx.Method())
	if m != rt.method && !(rt.method == fasthttp.MethodGet && m == fasthttp.MethodHead) {
		ctx.Response.Header.Set("Allow", rt.method)
		pdlb.WriteError(ctx, fasthttp.StatusMethodNotAllowed, pdlb.ErrInvalidRequest, "method "+m+" not allowed on "+path+"; use "+rt.method)
		return
	}
	if !rt.open && !r.cfg().auth.Check(ctx) {
		return
	}
	if rt.pd {
		rt.handler(ctx) // records its own metrics when it finishes
		return
	}
	start := r.clock.Now()
	rt.handler(ctx)
	r.metrics.Request(path, ctx.Response.StatusCode(), r.clock.Now().Sub(start))
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

// Serve answers on ln until Shutdown.
func (r *Router) Serve(ln net.Listener) error { return r.server.Serve(ln) }

// Shutdown drains: readiness turns 503, the listener closes, and in-flight
// requests and streams finish until ctx ends.
func (r *Router) Shutdown(ctx context.Context) error {
	r.draining.Store(true)
	r.stop()
	err := r.server.ShutdownWithContext(ctx)
	if !r.waitStreams(ctx.Done()) && err == nil {
		err = ctx.Err()
	}
	return err
}

// waitStreams waits for relayed streams to end, or for done to close.
func (r *Router) waitStreams(done <-chan struct{}) bool {
	ended := make(chan struct{})
	go func() { r.streams.Wait(); close(ended) }()
	select {
	case <-ended:
		return true
	case <-done:
		return false
	}
}
