package service

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"pdlb"
	"pdlb/config"
	"pdlb/proxy"
	"pdlb/router"
)

// BuildFunc makes a backend ready to serve (breaker, bootstrap address);
// Service.NewBackend is the one cmd/pdlb passes.
type BuildFunc func(url string, role proxy.Role, bootstrapPort *int) (*proxy.Backend, error)

// Admin serves the operator API on its own listener: list, add, drain and
// undrain workers at runtime. Its path is not the request path, so it favours
// clarity (encoding/json, a mutex) over allocation-free code.
type Admin struct {
	pool  *proxy.Pool
	build BuildFunc
	auth  pdlb.Bearer
	log   zerolog.Logger

	// mu makes find-then-add atomic (two POSTs of one URL: one 201, one 409)
	// and guards draining and drained.
	mu sync.Mutex
	// draining holds removed backends until their in-flight requests are
	// done, so GET /workers still shows them; closing a backend's channel
	// (undrain) ends its drain.
	draining map[*proxy.Backend]chan struct{}
	// drained remembers the last backends whose drain finished, oldest
	// first, so the status page can show them and undrain can add them
	// back as they were.
	drained []DrainedWorker

	// drainPoll is how often a drain looks at in-flight; drainMax bounds
	// the wait for requests that never finish.
	drainPoll time.Duration
	drainMax  time.Duration

	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup

	// OnDrained, when set before serving, is told when a drained backend's
	// last request is done (the Service then retires its registry namespace).
	OnDrained func(*proxy.Backend)

	// Shared, when set before serving (cluster.etcd), stores every addition
	// and removal for the other replicas before it is answered; Timeout
	// bounds that write.
	Shared  WorkerStore
	Timeout time.Duration
	// AvoidedPairs, when set, lists the prefill–decode pairs avoided now
	// (pair health), shown on both workers of each.
	AvoidedPairs func() []router.AvoidedPair
	// Flush, when set, answers POST /flush_cache: the engines' flush sent
	// with upstream_auth's admin key, which the serving listener's
	// /flush_cache is never lent.
	Flush fasthttp.RequestHandler
}

// NewAdmin builds the admin API; apiKey "" leaves it open (bind it to
// loopback then, as admin.host defaults to).
func NewAdmin(pool *proxy.Pool, build BuildFunc, apiKey string, log zerolog.Logger) *Admin {
	a := &Admin{
		pool:      pool,
		build:     build,
		log:       log,
		draining:  map[*proxy.Backend]chan struct{}{},
		drainPoll: 100 * time.Millisecond,
		drainMax:  10 * time.Minute,
		stop:      make(chan struct{}),
		auth:      pdlb.NewBearer("admin.api_key", apiKey),
	}
	return a
}

// Close ends the drains still waiting (their backends' idle connections
// are closed now) and waits for them; call it at shutdown.
func (a *Admin) Close() {
	a.stopOnce.Do(func() { close(a.stop) })
	a.wg.Wait()
}

// Worker is one backend as GET /workers shows it.
type Worker struct {
	Role     string `json:"role"`
	URL      string `json:"url"`
	Healthy  bool   `json:"healthy"`
	Breaker  string `json:"breaker"`
	InFlight int64  `json:"in_flight"`
	// DPInFlight is in flight per data-parallel rank (policy.dp_aware),
	// once the engine's DP size is known.
	DPInFlight []int64 `json:"dp_in_flight,omitempty"`
	// EngineLoad is the engine's own running and waiting requests, as its
	// load route last said (policy.power_of_two.engine_load); absent while
	// unknown.
	EngineLoad    *int64 `json:"engine_load,omitempty"`
	Selected      uint64 `json:"selected"`
	Draining      bool   `json:"draining"`
	RegistryReady bool   `json:"registry_ready"`
	BootstrapPort *int   `json:"bootstrap_port"`
	BootstrapAddr string `json:"bootstrap_addr"`
	// AvoidedWith lists the workers of the other role this one is not
	// paired with until the time given (breaker.pair_failures).
	AvoidedWith []AvoidedWith `json:"avoided_with,omitempty"`
}

// AvoidedWith is the other side of an avoided pair.
type AvoidedWith struct {
	URL   string    `json:"url"`
	Until time.Time `json:"until"`
}

// addRequest is POST /workers' body.
type addRequest struct {
	Role          string `json:"role"`
	URL           string `json:"url"`
	BootstrapPort *int   `json:"bootstrap_port"`
}

// Handler is the admin listener's fasthttp entry point.
func (a *Admin) Handler(ctx *fasthttp.RequestCtx) {
	if !a.authorized(ctx) {
		return
	}
	switch path := string(ctx.Path()); path {
	case "/workers":
	case "/workers/undrain":
		if postOnly(ctx, path) {
			a.undrain(ctx)
		}
		return
	case "/flush_cache":
		if a.Flush == nil {
			pdlb.WriteError(ctx, fasthttp.StatusNotFound, pdlb.ErrNotFound, "no admin route for "+path)
		} else if postOnly(ctx, path) {
			a.Flush(ctx)
		}
		return
	default:
		pdlb.WriteError(ctx, fasthttp.StatusNotFound, pdlb.ErrNotFound, "no admin route for "+path)
		return
	}
	switch string(ctx.Method()) {
	case fasthttp.MethodGet:
		a.list(ctx)
	case fasthttp.MethodPost:
		a.add(ctx)
	case fasthttp.MethodDelete:
		a.remove(ctx)
	default:
		ctx.Response.Header.Set("Allow", "GET, POST, DELETE")
		pdlb.WriteError(ctx, fasthttp.StatusMethodNotAllowed, pdlb.ErrInvalidRequest,
			"method "+string(ctx.Method())+" not allowed on /workers; use GET, POST or DELETE")
	}
}

// postOnly answers 405 to a method other than POST on path, and reports
// whether the request is a POST.
func postOnly(ctx *fasthttp.RequestCtx, path string) bool {
	if string(ctx.Method()) == fasthttp.MethodPost {
		return true
	}
	ctx.Response.Header.Set("Allow", "POST")
	pdlb.WriteError(ctx, fasthttp.StatusMethodNotAllowed, pdlb.ErrInvalidRequest,
		"method "+string(ctx.Method())+" not allowed on "+path+"; use POST")
	return false
}

// authorized checks admin.api_key, answering 401 when it is missing.
func (a *Admin) authorized(ctx *fasthttp.RequestCtx) bool { return a.auth.Check(ctx) }

// list answers GET /workers: prefills, decodes, then backends still draining.
func (a *Admin) list(ctx *fasthttp.RequestCtx) {
	out := []Worker{}
	for _, role := range []proxy.Role{proxy.Prefill, proxy.Decode} {
		for _, b := range a.pool.Backends(role) {
			out = append(out, a.worker(b))
		}
	}
	n := len(out)
	a.mu.Lock()
	for b := range a.draining {
		out = append(out, a.worker(b))
	}
	// Map order is random: list draining backends in a stable order.
	slices.SortFunc(out[n:], func(x, y Worker) int { return strings.Compare(x.URL, y.URL) })
	a.mu.Unlock()
	if a.AvoidedPairs != nil {
		pairs := a.AvoidedPairs()
		for i := range out {
			w := &out[i]
			for _, p := range pairs {
				switch {
				case w.Role == "prefill" && p.Prefill == w.URL:
					w.AvoidedWith = append(w.AvoidedWith, AvoidedWith{p.Decode, p.Until})
				case w.Role == "decode" && p.Decode == w.URL:
					w.AvoidedWith = append(w.AvoidedWith, AvoidedWith{p.Prefill, p.Until})
				}
			}
		}
	}
	pdlb.WriteJSON(ctx, fasthttp.StatusOK, out)
}

// add answers POST /workers.
func (a *Admin) add(ctx *fasthttp.RequestCtx) {
	var req addRequest
	dec := json.NewDecoder(bytes.NewReader(ctx.PostBody()))
	// Unknown fields are refused: a typo ("bootstrapPort") must not
	// silently add a prefill without its bootstrap port.
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		pdlb.WriteError(ctx, fasthttp.StatusBadRequest, pdlb.ErrInvalidRequest, "body: "+jsonProblem(err))
		return
	}
	if dec.More() {
		pdlb.WriteError(ctx, fasthttp.StatusBadRequest, pdlb.ErrInvalidRequest, "body: more than one JSON value")
		return
	}
	role, msg := parseRole(req.Role)
	if msg != "" {
		pdlb.WriteError(ctx, fasthttp.StatusBadRequest, pdlb.ErrInvalidRequest, msg)
		return
	}
	if _, err := config.ParseBackendURL(req.URL); err != nil {
		pdlb.WriteError(ctx, fasthttp.StatusBadRequest, pdlb.ErrInvalidRequest, "url: "+err.Error())
		return
	}
	if p := req.BootstrapPort; p != nil {
		if role != proxy.Prefill {
			pdlb.WriteError(ctx, fasthttp.StatusBadRequest, pdlb.ErrInvalidRequest, "bootstrap_port: only prefill workers have one")
			return
		}
		if *p < 1 || *p > 65535 {
			pdlb.WriteError(ctx, fasthttp.StatusBadRequest, pdlb.ErrInvalidRequest, fmt.Sprintf("bootstrap_port: %d is not a port (1-65535)", *p))
			return
		}
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	if old := a.pool.Find(req.URL); old != nil {
		pdlb.WriteError(ctx, fasthttp.StatusConflict, pdlb.ErrInvalidRequest,
			"url: "+old.URL+" is already a "+old.Role.String()+" worker; DELETE it first")
		return
	}
	b, err := a.build(req.URL, role, req.BootstrapPort)
	if err != nil {
		pdlb.WriteError(ctx, fasthttp.StatusBadRequest, pdlb.ErrInvalidRequest, "url: "+err.Error())
		return
	}
	if a.Shared != nil && !a.share(ctx, b, req) {
		return
	}
	a.pool.Add(b)
	a.forgetDrained(b.Key())
	a.log.Info().Str("backend", b.URL).Str("role", b.Role.String()).Msg("worker added via admin API")
	pdlb.WriteJSON(ctx, fasthttp.StatusCreated, a.worker(b))
}

// remove answers DELETE /workers?url=…: the backend leaves selection now,
// requests already on it finish (they hold the *Backend), and its idle
// connections are closed once none is left.
func (a *Admin) remove(ctx *fasthttp.RequestCtx) {
	raw := string(ctx.QueryArgs().Peek("url"))
	if raw == "" {
		pdlb.WriteError(ctx, fasthttp.StatusBadRequest, pdlb.ErrInvalidRequest, "url: query parameter required (DELETE /workers?url=http://host:port)")
		return
	}
	shared := false
	if a.Shared != nil {
		var ok bool
		if shared, ok = a.unshare(ctx, raw); !ok {
			return
		}
	}
	b := a.pool.Find(raw)
	if b == nil || !a.Drain(b) {
		if shared { // another replica's addition, not (yet) known here
			pdlb.WriteJSON(ctx, fasthttp.StatusAccepted, Worker{URL: raw, Draining: true})
			return
		}
		pdlb.WriteError(ctx, fasthttp.StatusNotFound, pdlb.ErrNotFound, "url: no worker "+raw)
		return
	}
	pdlb.WriteJSON(ctx, fasthttp.StatusAccepted, a.worker(b))
}

// Drain takes b out of the pool and drains it: no new requests, in-flight
// ones finish, then its connections close. Used by DELETE /workers and by
// config reloads that drop a backend. It reports false if b was not in the pool.
func (a *Admin) Drain(b *proxy.Backend) bool {
	a.mu.Lock()
	if !a.pool.Remove(b) {
		a.mu.Unlock()
		return false
	}
	b.Drain()
	undrained := make(chan struct{})
	a.draining[b] = undrained
	a.wg.Add(1)
	a.mu.Unlock()
	a.log.Info().Str("backend", b.URL).Str("role", b.Role.String()).Int64("in_flight", b.InFlight()).Msg("worker draining")
	go a.finishDrain(b, undrained)
	return true
}

// finishDrain waits for b's in-flight requests and then drops its
// connections: closing them earlier would cut requests still running. An
// undrain while it waits ends it with b left as it is (back in the pool).
func (a *Admin) finishDrain(b *proxy.Backend, undrained <-chan struct{}) {
	defer a.wg.Done()
	idle := a.waitIdle(b, undrained)
	a.mu.Lock()
	if _, ok := a.draining[b]; !ok {
		a.mu.Unlock()
		return // undrained
	}
	delete(a.draining, b)
	a.rememberDrained(b)
	a.mu.Unlock()
	if !idle {
		a.log.Warn().Str("backend", b.URL).Int64("in_flight", b.InFlight()).Dur("waited", a.drainMax).
			Msg("drain gave up waiting for in-flight requests")
	}
	b.Close()
	if a.OnDrained != nil {
		a.OnDrained(b)
	}
	a.log.Info().Str("backend", b.URL).Str("role", b.Role.String()).Msg("worker drained")
}

// waitIdle polls b's in-flight count until it is 0 (true), drainMax has
// passed, b is undrained or the Admin is closed (false). Polling keeps the
// request path free of drain bookkeeping: Ticket.Done only decrements a
// counter.
func (a *Admin) waitIdle(b *proxy.Backend, undrained <-chan struct{}) bool {
	tick := time.NewTicker(a.drainPoll)
	defer tick.Stop()
	deadline := time.NewTimer(a.drainMax)
	defer deadline.Stop()
	for b.InFlight() > 0 {
		select {
		case <-tick.C:
		case <-deadline.C:
			return false
		case <-undrained:
			return false
		case <-a.stop:
			return b.InFlight() == 0
		}
	}
	return true
}

func (a *Admin) worker(b *proxy.Backend) Worker {
	w := Worker{
		Role:          b.Role.String(),
		URL:           b.URL,
		Healthy:       b.Healthy(),
		Breaker:       "disabled",
		InFlight:      b.InFlight(),
		DPInFlight:    b.DPInFlight(),
		Selected:      b.Selected(),
		Draining:      b.Draining(),
		RegistryReady: a.pool.RegistryReady(b),
	}
	if n := b.EngineLoad(); n >= 0 {
		w.EngineLoad = &n
	}
	if b.Role == proxy.Prefill {
		bs := b.Bootstrap()
		w.BootstrapPort, w.BootstrapAddr = bs.Port, bs.Addr
	}
	if br := b.Breaker(); br != nil {
		w.Breaker = br.State().String()
	}
	return w
}

func parseRole(s string) (proxy.Role, string) {
	switch s {
	case "prefill":
		return proxy.Prefill, ""
	case "decode":
		return proxy.Decode, ""
	case "":
		return 0, `role: required ("prefill" or "decode")`
	}
	return 0, fmt.Sprintf(`role: %q is not "prefill" or "decode"`, s)
}

// jsonProblem words a decoding error for the client, naming the field
// where encoding/json tells it.
func jsonProblem(err error) string {
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &te) && te.Field != "":
		return fmt.Sprintf("%s: expected %s, got %s", te.Field, te.Type, te.Value)
	case errors.Is(err, io.EOF):
		return "empty; expected a JSON object"
	}
	return err.Error()
}
