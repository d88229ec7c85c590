package router

import (
	"errors"
	"net"
	"strings"

	"github.com/valyala/bytebufferpool"
	"github.com/valyala/fasthttp"

	"pdlb/proxy"
)

// serveStreamAsync hands a stream request to a goroutine of its own, which
// owns it from here on (and finishes it). The fasthttp worker goes back to
// its pool at once, and so does the request context with its read buffer
// (the hijack handler returns at once too, KeepHijackedConns): 5,000
// streams waiting for their first token hold neither. The body is copied
// first: it lives in the recycled context.
func (q *request) serveStreamAsync(ctx *fasthttp.RequestCtx) {
	s := new(request)
	*s = *q
	s.own = bytebufferpool.Get()
	s.own.B = append(s.own.B[:0], q.body...)
	s.body = s.own.B
	s.resp = nil // ctx.Response is recycled; the stream writes its own
	// The routing key, too, points into the recycled context.
	s.key = strings.Clone(q.key)
	q.r.streams.Add(1)
	q.r.activeStreams.Add(1)
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) {
		s.conn, s.hijacked = rawConn(c), true
		go s.serveStream()
	})
}

// serveStream runs a stream request on its hijacked connection: the
// attempts, then the relay or an ordinary HTTP error answer.
func (q *request) serveStream() {
	defer q.finish()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	resp.Header.Set(proxy.HeaderRequestID, q.id)
	q.resp = resp
	// The attempts run on a goroutine of their own: they grow its stack
	// (dialling, writing requests, parsing responses), and this one, which
	// holds the connection for the whole stream, would keep that stack,
	// mostly unused, until the stream ends.
	q.resumable = q.migratable()
	committed := make(chan *proxy.Stream, 1)
	go func() { committed <- q.exchange() }()
	s := <-committed
	if !q.resumable {
		// The attempts are over: each leg sent its own copy of the body.
		// (A resumable stream keeps it for a continuation, until finish.)
		bytebufferpool.Put(q.own)
		q.own, q.body = nil, nil
	}
	if s == nil {
		writeResponse(q.conn, resp, q.r.cfg().Server.WriteTimeout)
		return
	}
	q.relay(s)
}

// relay writes a committed stream to the client's raw connection: the
// response head goes out with the first event, then one chunk per event.
func (q *request) relay(s *proxy.Stream) {
	w := acquireChunkWriter(q.conn, streamHead(q.id))
	defer releaseChunkWriter(w)
	wt := q.r.cfg().Server.WriteTimeout
	var cw *continuedWriter
	var out proxy.EventWriter = w
	if q.resumable && q.parsed.batch > 0 { // its items' last events are kept here
		cw = newContinuedWriter(w, true, q.parsed.batch)
		out = cw
		s.KeepLast(false)
	}
	res := s.Relay(out, q.conn, wt)
	q.bytes, q.events = res.Bytes, res.Events
	for res.Resumable { // the decode broke mid-way: migrate (migrate.go)
		if s = q.migrate(w, &cw, &res); s == nil {
			res.Err = q.err
			break
		}
		s.KeepLast(false) // cw keeps each item's last event
		res = s.Relay(cw, q.conn, wt)
		q.bytes, q.events = q.bytes+res.Bytes, q.events+res.Events
	}
	if !errors.Is(res.Err, proxy.ErrClientGone) {
		w.close()
	}
	if res.Err != nil {
		q.err = res.Err
		if errors.Is(res.Err, proxy.ErrClientGone) {
			q.status = statusClientGone
		}
	}
}
