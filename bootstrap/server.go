package bootstrap

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
)

// Content types of SGLang's aiohttp server (§3).
const (
	ctText = "text/plain; charset=utf-8"
	ctJSON = "application/json; charset=utf-8"
)

// maxBodyBytes bounds registry request bodies; real ones are < 1 KiB, a
// query_dp_ranks batch a few KiB.
const maxBodyBytes = 1 << 20

// Server serves one namespace's routes on one listener. The cmd wiring
// starts one per configured prefill bootstrap port.
type Server struct {
	reg  *Registry
	port int
	srv  *fasthttp.Server

	mu     sync.Mutex
	lns    []net.Listener
	closed bool
}

// NewServer returns a server for the namespace of port, creating the
// namespace if needed.
func (r *Registry) NewServer(port int) *Server {
	r.AddNamespace(port)
	return &Server{
		reg:  r,
		port: port,
		srv: &fasthttp.Server{
			Handler:               r.Handler(port),
			Name:                  "pdlb-bootstrap",
			NoDefaultServerHeader: true,
			MaxRequestBodySize:    maxBodyBytes,
			ReadTimeout:           30 * time.Second,
			WriteTimeout:          30 * time.Second,
			IdleTimeout:           120 * time.Second,
			Logger:                printfLogger{r.log},
		},
	}
}

// Serve answers on ln until Shutdown; like fasthttp it returns nil after a
// clean shutdown.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = ln.Close()
		return nil
	}
	s.lns = append(s.lns, ln)
	s.mu.Unlock()
	// Who may write is the registry's security posture; say it where an
	// operator looks first.
	s.reg.log.Info().Int("bootstrap_port", s.port).Str("listen", ln.Addr().String()).
		Bool("write_token", s.reg.auth.Enabled()).Strs("allowed_sources", s.reg.cfg.AllowedSources).
		Msg("bootstrap registry listening")
	err := s.srv.Serve(ln)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil // our Shutdown closed the listener
	}
	return err
}

// Shutdown stops accepting, waits for in-flight requests or ctx. It also
// closes the listeners itself: fasthttp only knows a listener once its
// Serve has started, so a Shutdown racing a just-launched Serve would
// otherwise leave that Serve blocked in Accept forever.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	lns := s.lns
	s.mu.Unlock()
	err := s.srv.ShutdownWithContext(ctx)
	for _, ln := range lns {
		_ = ln.Close()
	}
	return err
}

// Handler returns the fasthttp handler of the namespace of port. The
// namespace is looked up per request, so RemoveNamespace takes effect
// immediately (everything then answers 404).
func (r *Registry) Handler(port int) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		if ns := r.namespace(port); ns != nil {
			r.dispatch(ns, ctx)
		} else {
			textReply(ctx, fasthttp.StatusNotFound, "404: Not Found")
		}
		if r.Observe != nil {
			r.Observe(routeLabel(ctx.Path()), ctx.Response.StatusCode())
		}
	}
}

// dispatch is the route table (§3). Writes (PUT, POST /register_dp_rank,
// DELETE) pass admitWrite first (source, then token); reads never do.
func (r *Registry) dispatch(ns *Namespace, ctx *fasthttp.RequestCtx) {
	switch string(ctx.Path()) {
	case "/route":
		switch {
		case ctx.IsGet():
			r.handleGetRoute(ns, ctx)
		case ctx.IsPut():
			if w, ok := r.admitWrite(ns, ctx); ok {
				r.handlePutRoute(ns, ctx, w)
			}
		case ctx.IsDelete():
			if w, ok := r.admitWrite(ns, ctx); ok {
				r.handleDeleteRoute(ns, ctx, w)
			}
		default:
			// SGLang's quirk: plain text labelled JSON.
			ctx.Response.Header.Set(fasthttp.HeaderAllow, "GET, PUT, DELETE")
			ctx.SetStatusCode(fasthttp.StatusMethodNotAllowed)
			ctx.SetContentType(ctJSON)
			ctx.SetBodyString("Method not allowed")
		}
	case "/register_dp_rank":
		if !ctx.IsPost() {
			methodNotAllowed(ctx, "POST")
		} else if _, ok := r.admitWrite(ns, ctx); ok {
			r.handleRegisterDPRank(ns, ctx)
		}
	case "/query_dp_ranks":
		if !ctx.IsPost() {
			methodNotAllowed(ctx, "POST")
		} else {
			r.handleQueryDPRanks(ns, ctx)
		}
	case "/health":
		if !ctx.IsGet() && !ctx.IsHead() {
			methodNotAllowed(ctx, "GET, HEAD")
		} else {
			textOK(ctx)
		}
	default:
		textReply(ctx, fasthttp.StatusNotFound, "404: Not Found")
	}
}

// routeLabel names a request's route for metrics: one of the registry's
// routes, or "other", so that requests for random paths cannot create
// unbounded series.
func routeLabel(path []byte) string {
	switch p := string(path); p {
	case "/route", "/register_dp_rank", "/query_dp_ranks", "/health":
		return p
	}
	return "other"
}

func textReply(ctx *fasthttp.RequestCtx, status int, body string) {
	ctx.SetStatusCode(status)
	ctx.SetContentType(ctText)
	ctx.SetBodyString(body)
}

func textOK(ctx *fasthttp.RequestCtx) { textReply(ctx, fasthttp.StatusOK, "OK") }

func jsonReply(ctx *fasthttp.RequestCtx, status int, body []byte) {
	ctx.SetStatusCode(status)
	ctx.SetContentType(ctJSON)
	ctx.SetBody(body)
}

func methodNotAllowed(ctx *fasthttp.RequestCtx, allow string) {
	ctx.Response.Header.Set(fasthttp.HeaderAllow, allow)
	textReply(ctx, fasthttp.StatusMethodNotAllowed, "405: Method Not Allowed")
}

func badRequest(ctx *fasthttp.RequestCtx, err error) {
	textReply(ctx, fasthttp.StatusBadRequest, "Invalid bootstrap request: "+err.Error())
}

// notReady is pdlb's answer to the bootstrap race: 503 with Retry-After and
// how far registration got, so a decode (or a human) knows to wait.
func notReady(ctx *fasthttp.RequestCtx, ns *Namespace) {
	ctx.Response.Header.Set(fasthttp.HeaderRetryAfter, "1")
	textReply(ctx, fasthttp.StatusServiceUnavailable,
		"Prefill server not fully registered yet ("+countText(ns.state.registered.Load(), ns.state.expected.Load())+").")
}

// printfLogger routes fasthttp's internal messages (malformed requests,
// timeouts) to zerolog at debug: they are client noise, not pdlb faults.
type printfLogger struct{ log zerolog.Logger }

func (l printfLogger) Printf(format string, args ...any) { l.log.Debug().Msgf(format, args...) }
