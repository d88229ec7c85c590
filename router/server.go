package router

import (
	"errors"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"pdlb"
)

// newServer builds the client-facing fasthttp server with the limits that
// protect pdlb from slow or hostile clients.
func (r *Router) newServer() *fasthttp.Server {
	cfg := r.cfg()
	return &fasthttp.Server{
		Handler:        r.Handler,
		Name:           "pdlb",
		ReadTimeout:    cfg.Server.ReadTimeout,
		WriteTimeout:   cfg.Server.WriteTimeout,
		IdleTimeout:    cfg.Server.IdleTimeout,
		ReadBufferSize: cfg.Server.MaxHeaderBytes,
		// Stream relays outlive their hijack handler (see serveStreamAsync).
		KeepHijackedConns: true,
		// Idle workers keep the stacks they grew; a burst of streams leaves
		// thousands of them, so they go after 2 s instead of 10.
		MaxIdleWorkerDuration: 2 * time.Second,
		MaxRequestBodySize:    cfg.Limits.MaxBodyBytes,
		ErrorHandler:          r.serverError,
		Logger:                fasthttpLogger{r},
	}
}

// serverError turns fasthttp's own refusals (body too large, header too
// big, read timeout) into pdlb's JSON error shape.
func (r *Router) serverError(ctx *fasthttp.RequestCtx, err error) {
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		pdlb.WriteError(ctx, fasthttp.StatusRequestEntityTooLarge, pdlb.ErrInvalidRequest,
			"request body larger than limits.max_body_bytes ("+strconv.Itoa(r.cfg().Limits.MaxBodyBytes)+" bytes)")
	case isTimeout(err):
		pdlb.WriteError(ctx, fasthttp.StatusRequestTimeout, pdlb.ErrInvalidRequest, "request not received in time")
	case isHeaderTooLarge(err):
		pdlb.WriteError(ctx, fasthttp.StatusRequestHeaderFieldsTooLarge, pdlb.ErrInvalidRequest, "request headers larger than server.max_header_bytes")
	default:
		pdlb.WriteError(ctx, fasthttp.StatusBadRequest, pdlb.ErrInvalidRequest, "malformed HTTP request: "+err.Error())
	}
	r.log.Warn().Err(err).Str("remote", ctx.RemoteAddr().String()).Msg("refused malformed request")
}

func isTimeout(err error) bool {
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}

func isHeaderTooLarge(err error) bool {
	var se *fasthttp.ErrSmallBuffer
	return errors.As(err, &se)
}

type fasthttpLogger struct{ r *Router }

func (l fasthttpLogger) Printf(format string, args ...any) {
	l.r.log.Debug().Msgf(format, args...)
}
