package router

import (
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"net"
	"strconv"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/bytebufferpool"
	"github.com/valyala/fasthttp"

	"pdlb"
	"pdlb/proxy"
)

// pdHandler serves a fan-out route: parse, select a pair, inject, run the
// attempt (retrying before the first byte), answer or start the relay.
func (r *Router) pdHandler(path string, batchAware bool) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		r.servePD(ctx, path, batchAware)
	}
}

// pdLog collects what the one log line per request says.
type pdLog struct {
	path      string
	requestID string
	prefill   string
	decode    string
	room      uint64
	attempts  int
	status    int
	bytes     int
	events    int
	err       error
}

func (r *Router) servePD(ctx *fasthttp.RequestCtx, path string, batchAware bool) {
	start := r.now()
	lg := pdLog{path: path, requestID: requestID(ctx)}
	ctx.Response.Header.Set(proxy.HeaderRequestID, lg.requestID)

	release, status, aerr := r.admission.Acquire(ctx)
	if aerr != nil {
		r.metrics.Counter(`pdlb_admission_refused_total{status="` + strconv.Itoa(status) + `"}`).Inc()
		if status == fasthttp.StatusTooManyRequests {
			pdlb.WriteError(ctx, status, pdlb.ErrRateLimited, "too many requests: "+aerr.Error())
			ctx.Response.Header.Set("Retry-After", "1")
		} else {
			pdlb.SetUnavailable(&ctx.Response, 1, "no capacity: "+aerr.Error())
		}
		lg.status, lg.err = status, aerr
		r.logPD(&lg, start)
		return
	}
	body := ctx.PostBody()
	req, err := parseRequest(body)
	if err != nil {
		release()
		pdlb.WriteError(ctx, fasthttp.StatusBadRequest, pdlb.ErrInvalidRequest, err.Error())
		lg.status, lg.err = fasthttp.StatusBadRequest, err
		r.logPD(&lg, start)
		return
	}
	if !batchAware {
		// The OpenAI routes always take scalars; the engine expands them.
		req.batch = 0
	}
	if !req.stream {
		r.exchange(&ctx.Response, ctx.Conn(), path, body, &req, &lg, start)
		release()
		return
	}
	// A stream is served on the hijacked connection from here on, by a
	// goroutine of its own that starts with a small stack: the fasthttp
	// worker goes back to its pool at once, the hijack handler returns at
	// once too (so fasthttp recycles the request context and drops its
	// read buffer, KeepHijackedConns), and the relay writes chunks straight
	// to the socket (see sse_writer.go). The body is copied first: it lives
	// in the recycled context.
	own := bytebufferpool.Get()
	own.B = append(own.B[:0], body...)
	// Copies for the stream's goroutine, so that req and lg stay on the
	// stack of every non-stream request.
	streamReq, streamLog := new(pdRequest), new(pdLog)
	*streamReq, *streamLog = req, lg
	r.streams.Add(1)
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) {
		go r.serveStream(rawConn(c), path, own, streamReq, streamLog, start, release)
	})
}

// serveStream runs a stream request on its hijacked connection: the
// attempts, then either the relay or an ordinary HTTP error response.
func (r *Router) serveStream(conn net.Conn, path string, body *bytebufferpool.ByteBuffer, req *pdRequest, lg *pdLog, start time.Time, release func()) {
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	resp.Header.Set(proxy.HeaderRequestID, lg.requestID)
	s := r.exchange(resp, conn, path, body.B, req, lg, start)
	bytebufferpool.Put(body) // the attempts are over; each leg sent its own copy
	if s == nil {
		writeResponse(conn, resp, r.cfg().Server.WriteTimeout)
		r.endStream(conn, release)
		return
	}
	// The relay, which holds the connection for the whole stream, starts
	// on a fresh goroutine: this one's stack grew with the attempts (dial,
	// request, response parsing) and would be kept, mostly unused, until
	// the end of the stream.
	go func() {
		r.relay(conn, s, lg, start)
		r.endStream(conn, release)
	}()
}

// endStream closes a hijacked stream connection (the server keeps those
// open, KeepHijackedConns) and gives its admission back.
func (r *Router) endStream(conn net.Conn, release func()) {
	conn.Close()
	release()
	r.streams.Done()
}

// exchange runs the attempts of one fan-out request, retrying before the
// first byte. It returns the committed stream of a stream request, to be
// relayed; otherwise (nil) the answer or the error is in resp and the
// request is logged. client is watched for a disconnect meanwhile.
func (r *Router) exchange(resp *fasthttp.Response, client net.Conn, path string, body []byte, req *pdRequest, lg *pdLog, start time.Time) *proxy.Stream {
	cfg := r.cfg()
	deadline := start.Add(cfg.Timeout.Request)
	var exclude []*proxy.Backend
	var lastErr *proxy.UpstreamError
	for attempt := 1; ; attempt++ {
		lg.attempts = attempt
		ans, uerr, status, msg := r.attempt(client, path, body, req, lg, exclude, deadline)
		if ans != nil {
			return r.answer(resp, ans, lg, start)
		}
		if uerr == nil {
			// Refused before any backend was contacted (no pair, bad rank).
			if lastErr != nil && status == fasthttp.StatusServiceUnavailable {
				uerr = lastErr // retries ran out of backends: report the real failure
			} else {
				if status == fasthttp.StatusServiceUnavailable {
					pdlb.SetUnavailable(resp, 1, msg)
				} else {
					pdlb.SetError(resp, status, pdlb.ErrInvalidRequest, msg)
				}
				lg.status, lg.err = status, errors.New(msg)
				r.logPD(lg, start)
				return nil
			}
		}
		lastErr = uerr
		if errors.Is(uerr.Err, proxy.ErrClientGone) {
			lg.status, lg.err = 499, uerr
			r.logPD(lg, start)
			return nil
		}
		if attempt >= cfg.Retry.MaxAttempts || !uerr.Retryable() || !r.now().Before(deadline) {
			break
		}
		exclude = append(exclude, uerr.Backend)
		r.log.Warn().Str("request_id", lg.requestID).Int("attempt", attempt).Err(uerr).Msg("retrying on another pair")
		r.metrics.Retry(path)
		if !sleepUntil(backoff(cfg.Retry.Initial, cfg.Retry.Max, attempt), deadline) {
			break
		}
	}
	status := lastErr.ClientStatus()
	if lastErr.Kind == proxy.KindStatus && status < 500 {
		// A backend's 4xx is the client's answer: pass it through as is.
		resp.SetStatusCode(lastErr.Status)
		resp.Header.SetContentTypeBytes(lastErr.ContentType)
		resp.SetBody(lastErr.Body)
	} else {
		pdlb.SetError(resp, status, pdlb.ErrUpstream, lastErr.Error())
	}
	lg.status, lg.err = status, lastErr
	r.logPD(lg, start)
	return nil
}

// attempt selects a pair, injects and runs one fan-out. It returns either an
// answer, an upstream error, or a status and message for a refusal.
func (r *Router) attempt(client net.Conn, path string, body []byte, req *pdRequest, lg *pdLog, exclude []*proxy.Backend, deadline time.Time) (*proxy.Answer, *proxy.UpstreamError, int, string) {
	cfg := r.cfg()
	ok := func(b *proxy.Backend) bool { return r.pool.Available(b) && !contains(exclude, b) }
	pt, dt, msg := r.pickPair(ok)
	if msg != "" && req.rankField != "" && r.info != nil {
		// A request that names a prefill DP rank may wait (bounded by
		// bootstrap.info_wait, in checkRank) for a prefill still registering,
		// so the very first request of a fresh deployment succeeds. Other
		// requests get their 503 at once.
		registering := func(b *proxy.Backend) bool {
			return b.Role == proxy.Prefill && !r.pool.RegistryReady(b) && r.pool.AvailableIgnoringRegistry(b)
		}
		pt, dt, msg = r.pickPair(func(b *proxy.Backend) bool { return (ok(b) || registering(b)) && !contains(exclude, b) })
	}
	if msg != "" {
		return nil, nil, fasthttp.StatusServiceUnavailable, msg
	}
	p, d := pt.Backend(), dt.Backend()
	lg.prefill, lg.decode = p.URL, d.URL

	dpSize, status, msg := r.checkRank(p, req, deadline)
	if status != 0 {
		pt.Release()
		dt.Release()
		return nil, nil, status, msg
	}
	in := injection{host: p.Host, port: p.Bootstrap().Port, batch: req.batch > 0}
	if cfg.AdvertiseHost != "" {
		in.host = cfg.AdvertiseHost
	}
	var one [1]uint64
	if in.batch {
		in.rooms = make([]uint64, req.batch)
	} else {
		in.rooms = one[:]
	}
	for i := range in.rooms {
		in.rooms[i] = newRoom(dpSize, req.prefillRank)
	}
	lg.room = in.rooms[0]
	// Both bodies live in one pooled buffer that the proxy returns once both
	// legs have sent them.
	buf := bytebufferpool.Get()
	buf.B = appendInjected(buf.B[:0], body, req, rankFor(&in, req, dpSize, "routed_dp_rank"))
	pEnd := len(buf.B)
	if req.rankField != "" && dpSize > 0 {
		buf.B = appendInjected(buf.B, body, req, rankFor(&in, req, dpSize, "disagg_prefill_dp_rank"))
	}
	pBody, dBody := buf.B[:pEnd], buf.B[pEnd:]
	if len(dBody) == 0 {
		dBody = pBody
	}
	x := proxy.Exchange{
		Prefill: pt, Decode: dt, Path: path,
		PrefillBody: pBody, DecodeBody: dBody, Buffer: buf,
		Stream: req.stream, MergeLogprobs: req.returnLogprob && path == "/generate",
		RequestID: lg.requestID, Deadline: deadline, ClientConn: client,
	}
	ans, uerr := r.proxy.Do(&x)
	return ans, uerr, 0, ""
}

// rankFor returns the injection for one leg: with a client-named prefill
// rank, the prefill gets routed_dp_rank and the decode disagg_prefill_dp_rank.
func rankFor(in *injection, req *pdRequest, dpSize int, key string) *injection {
	if req.rankField == "" || dpSize == 0 {
		return in
	}
	leg := *in
	leg.rankKey, leg.rank = key, req.prefillRank
	return &leg
}

// pickPair selects a prefill and a decode whose breakers admit a request.
// A backend whose breaker refuses at admission (half-open probes used up)
// is skipped and another one tried.
func (r *Router) pickPair(ok func(*proxy.Backend) bool) (proxy.Ticket, proxy.Ticket, string) {
	pt, why := r.pickOne(proxy.Prefill, ok)
	if why != "" {
		return pt, pt, why
	}
	dt, why := r.pickOne(proxy.Decode, ok)
	if why != "" {
		pt.Release()
		return pt, dt, why
	}
	return pt, dt, ""
}

func (r *Router) pickOne(role proxy.Role, ok func(*proxy.Backend) bool) (proxy.Ticket, string) {
	all := r.pool.Backends(role)
	var refused []*proxy.Backend
	for {
		b := r.selector.Select(all, func(b *proxy.Backend) bool { return ok(b) && !contains(refused, b) })
		if b == nil {
			return proxy.Ticket{}, noBackendMessage(role, len(all))
		}
		if t, admitted := b.Acquire(); admitted {
			return t, ""
		}
		refused = append(refused, b)
	}
}

func noBackendMessage(role proxy.Role, n int) string {
	if n == 0 {
		return "no " + role.String() + " backend configured"
	}
	return "no " + role.String() + " backend available: all " + strconv.Itoa(n) + " are unhealthy, draining, not registered or behind an open circuit breaker"
}

func contains(list []*proxy.Backend, b *proxy.Backend) bool {
	for _, x := range list {
		if x == b {
			return true
		}
	}
	return false
}

// answer writes a committed non-streamed answer into resp (and returns
// nil), or returns a committed stream for the caller to relay.
func (r *Router) answer(resp *fasthttp.Response, ans *proxy.Answer, lg *pdLog, start time.Time) *proxy.Stream {
	lg.status = ans.Status
	r.metrics.TTFT(lg.path, r.now().Sub(start))
	if ans.Stream != nil {
		return ans.Stream
	}
	resp.SetStatusCode(ans.Status)
	resp.Header.SetContentTypeBytes(ans.ContentType)
	resp.SetBody(ans.Body)
	lg.bytes = len(ans.Body)
	ans.Release()
	r.logPD(lg, start)
	return nil
}

// relay writes a committed stream to the client's raw connection: the
// response head goes out with the first event, then one chunk per event.
func (r *Router) relay(conn net.Conn, s *proxy.Stream, lg *pdLog, start time.Time) {
	writeTimeout := r.cfg().Server.WriteTimeout
	w := acquireChunkWriter(conn, streamHead(lg.requestID))
	defer releaseChunkWriter(w)
	res := s.Relay(w, conn, writeTimeout)
	if !errors.Is(res.Err, proxy.ErrClientGone) {
		w.close()
	}
	lg.bytes, lg.events = res.Bytes, res.Events
	if res.Err != nil {
		lg.err = res.Err
		if errors.Is(res.Err, proxy.ErrClientGone) {
			lg.status = 499
		}
	}
	r.logPD(lg, start)
}

// logPD finishes a fan-out request: its one log line and its metrics.
func (r *Router) logPD(lg *pdLog, start time.Time) {
	elapsed := r.now().Sub(start)
	r.metrics.Request(lg.path, lg.status, elapsed)
	var ev *zerolog.Event
	switch {
	case lg.status >= 500 || lg.status == 499:
		ev = r.log.Warn()
	case lg.err != nil && lg.status < 400:
		ev = r.log.Warn() // a stream that broke after its 200
	default:
		ev = r.log.Info()
	}
	if !ev.Enabled() {
		return
	}
	ev = ev.Str("method", "POST").Str("path", lg.path).Int("status", lg.status).
		Str("request_id", lg.requestID).Str("prefill", lg.prefill).Str("decode", lg.decode).
		Uint64("room", lg.room).Int("attempts", lg.attempts).Dur("duration", elapsed).
		Int("bytes", lg.bytes)
	if lg.events > 0 {
		ev = ev.Int("events", lg.events)
	}
	if lg.err != nil {
		ev = ev.Err(lg.err)
	}
	ev.Msg("request")
}

// requestID takes the client's X-Request-ID or makes one. The client's is
// kept only when it is up to 128 visible ASCII characters: it is copied
// verbatim into both engine requests' heads.
func requestID(ctx *fasthttp.RequestCtx) string {
	if id := ctx.Request.Header.Peek(proxy.HeaderRequestID); len(id) > 0 && len(id) <= 128 && visibleASCII(id) {
		return string(id)
	}
	var raw [8]byte
	v := rand.Uint64()
	for i := range raw {
		raw[i] = byte(v >> (8 * i))
	}
	return "req-" + hex.EncodeToString(raw[:])
}

func visibleASCII(b []byte) bool {
	for _, c := range b {
		if c <= ' ' || c > '~' {
			return false
		}
	}
	return true
}

// backoff is exponential with full jitter in [d/2, d].
func backoff(initial, maxDelay time.Duration, attempt int) time.Duration {
	d := initial << (attempt - 1)
	if d <= 0 || d > maxDelay {
		d = maxDelay
	}
	if d <= 0 {
		return 0
	}
	return d/2 + rand.N(d/2+1)
}

// sleepUntil waits d unless the request deadline comes first.
func sleepUntil(d time.Duration, deadline time.Time) bool {
	if until := time.Until(deadline); d > until {
		return false
	}
	if d > 0 {
		time.Sleep(d)
	}
	return true
}
