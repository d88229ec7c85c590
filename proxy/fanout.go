package proxy

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/bytebufferpool"

	"pdlb/config"
)

// Proxy runs fan-out attempts: one prefill leg and one decode leg at once.
type Proxy struct {
	timeouts atomic.Pointer[config.Timeouts]
	log      zerolog.Logger
	now      func() time.Time
	obs      LegObserver
	aborts   aborter
}

// New returns a Proxy with the given leg timeouts.
func New(t config.Timeouts, log zerolog.Logger) *Proxy {
	p := &Proxy{log: log, now: time.Now}
	p.aborts.now = time.Now
	p.SetTimeouts(t)
	return p
}

// SetTimeouts swaps the timeouts (hot reload); in-flight attempts keep theirs.
func (p *Proxy) SetTimeouts(t config.Timeouts) { p.timeouts.Store(&t) }

// Timeouts returns the current timeouts.
func (p *Proxy) Timeouts() config.Timeouts { return *p.timeouts.Load() }

// Exchange is one attempt of a PD request.
type Exchange struct {
	Prefill, Decode Ticket
	// Path is the upstream path ("/generate", "/v1/chat/completions", …).
	Path string
	// PrefillBody and DecodeBody are the injected bodies (often the same slice).
	PrefillBody, DecodeBody []byte
	Stream                  bool
	MergeLogprobs           bool
	RequestID               string
	// Deadline ends the whole request, whatever the leg timeouts say.
	Deadline time.Time
	// ClientConn is watched for a disconnect before the answer is committed; may be nil.
	ClientConn net.Conn
	// Buffer, when set, holds PrefillBody and DecodeBody; it goes back to
	// its pool once both legs are done with them.
	Buffer *bytebufferpool.ByteBuffer
	// PrefillTrace and DecodeTrace are extra head lines for each leg's
	// request, each ending in CRLF (the W3C traceparent of the leg's span);
	// Do copies them before it returns.
	PrefillTrace, DecodeTrace []byte
	// Tracer, when set, receives each leg's report as it ends.
	Tracer LegTracer
	// RID is the rid member's value as the engines read it (a JSON string,
	// or a list of them): what POST /abort_request names when the attempt
	// fails (abort.go). Empty: no aborts. It must stay valid until the
	// attempt ends (it lives in Buffer, before the bodies).
	RID []byte
	// RIDItems, when RID is one string on a batch, is the number of items:
	// SGLang names item i "<rid>_<i>", and aborts those.
	RIDItems int
	// AbortsSent, when set, is held by the attempt until its aborts have
	// been sent: a caller retrying with the same rid (the client's) waits
	// on it, so no late abort meets the retry's legs.
	AbortsSent *sync.WaitGroup
	// Resumable marks a stream its caller may continue elsewhere when the
	// decode breaks mid-way (mid-stream migration): Relay then keeps a copy
	// of the last event it wrote (unless Stream.KeepLast(false)) and,
	// instead of ending the client's stream
	// with an error event, returns (RelayResult.Resumable, Last) and leaves
	// the ending to the caller (WriteStreamError).
	Resumable bool
}

// Answer is what the client gets once the decode committed. ContentType
// and Body point into the attempt's buffers: copy them out, then Release
// (streams release themselves when the relay ends).
type Answer struct {
	// Non-streaming: the decode's status, content type and (merged) body.
	Status      int
	ContentType []byte
	Body        []byte
	// Stream is set for streaming answers; relay it with Stream.Relay.
	Stream *Stream
	a      *attempt
}

// Release hands a non-streaming answer's buffers back.
func (ans *Answer) Release() {
	if ans.Stream == nil && ans.a != nil {
		a := ans.a
		ans.a = nil
		a.unref()
	}
}

// ErrClientGone is reported when the client disconnected before the answer.
var ErrClientGone = errors.New("client disconnected")

// commit states shared by the two legs of one attempt.
const (
	pending int32 = iota
	committed
	prefillFailed
	decodeFailed
)

// attempt is one fan-out. It is pooled and reference-counted: the request
// goroutine (until the answer is released or the stream ends) and the
// prefill goroutine each hold a reference; the last one to let go returns
// the legs' connections and the body buffer, so nothing is allocated per
// request beyond what fasthttp and gobreaker need.
type attempt struct {
	x      Exchange
	p      *Proxy
	pl, dl leg
	state  atomic.Int32
	refs   atomic.Int32
	pdone  chan *UpstreamError // capacity 1: the prefill goroutine's outcome
	// prefillOK is set once the prefill has answered 200 (its whole answer,
	// or a stream's first event): a decode that times out after it waited
	// for KV that did not come (UpstreamError.AfterPrefill).
	prefillOK atomic.Bool
	pFirst    []byte // prefill's first SSE event payload (stream + merge)
	deadline  time.Time
	t         config.Timeouts
	ans       Answer
	merged    []byte // merged non-stream body
	stream    Stream
	watch     *clientWatch
	// start is when the legs were sent (the observer's answer times).
	start time.Time
	// ptrace and dtrace hold the legs' trace head lines: the caller's may
	// change once Do returns, before the prefill goroutine has sent them.
	ptrace, dtrace []byte
	// why is the first AbortReason the attempt met (0: none yet): why a
	// leg pdlb gave up is aborted in its engine.
	why atomic.Uint32
}

var attemptPool = sync.Pool{New: func() any { return &attempt{pdone: make(chan *UpstreamError, 1)} }}

func (a *attempt) unref() {
	if a.refs.Add(-1) != 0 {
		return
	}
	a.abortGivenUp()
	if wg := a.x.AbortsSent; wg != nil {
		wg.Done()
	}
	a.pl.reset()
	a.dl.reset()
	a.why.Store(0)
	select {
	case <-a.pdone:
	default:
	}
	if a.x.Buffer != nil {
		bytebufferpool.Put(a.x.Buffer)
	}
	a.x = Exchange{}
	a.state.Store(pending)
	a.prefillOK.Store(false)
	a.pFirst = a.pFirst[:0]
	a.merged = a.merged[:0]
	a.ans = Answer{}
	a.stream.reset()
	a.watch = nil
	attemptPool.Put(a)
}

// setWhy records why the attempt failed, unless it already knew.
func (a *attempt) setWhy(why AbortReason) { a.why.CompareAndSwap(0, uint32(why)) }

// failedWhy is the reason a leg's failure gives its sibling's abort.
func failedWhy(err *UpstreamError, role Role) AbortReason {
	switch {
	case err.Kind == KindTimeout:
		return AbortTimeout
	case role == Prefill:
		return AbortPrefillFailed
	}
	return AbortDecodeFailed
}

// abortGivenUp aborts, in their engines, the legs pdlb gave up while the
// engines were still working on them (the attempt is over: nothing of it
// is read again but the rid, copied by abort).
func (a *attempt) abortGivenUp() {
	if len(a.x.RID) == 0 {
		return
	}
	for _, l := range [2]*leg{&a.pl, &a.dl} {
		if !l.gaveUp || l.b == nil {
			continue
		}
		why := AbortReason(a.why.Load())
		switch {
		case l.timedOut:
			why = AbortTimeout
		case why == 0 && l == &a.pl: // cut for a reason nobody named: its sibling's
			why = AbortDecodeFailed
		case why == 0:
			why = AbortPrefillFailed
		}
		a.p.abort(l.b, why, a.x.RID, a.x.RIDItems, a.x.AbortsSent)
	}
}

// clientGone cancels both legs (the client-watch callback).
func (a *attempt) clientGone() {
	a.setWhy(AbortClientGone)
	a.pl.cancel(ErrClientGone)
	a.dl.cancel(ErrClientGone)
}

// Do runs one attempt. On failure before the decode's first byte it returns
// the failing leg's error with the sibling leg already cut; the caller may
// retry on another pair. Tickets are settled here.
func (p *Proxy) Do(x *Exchange) (*Answer, *UpstreamError) {
	now := p.now()
	a := attemptPool.Get().(*attempt)
	a.x, a.p, a.t = *x, p, p.Timeouts()
	if x.AbortsSent != nil {
		x.AbortsSent.Add(1) // until the last reference is let go (unref)
	}
	if len(x.PrefillTrace)+len(x.DecodeTrace) > 0 {
		a.ptrace = append(a.ptrace[:0], x.PrefillTrace...)
		a.dtrace = append(a.dtrace[:0], x.DecodeTrace...)
		a.x.PrefillTrace, a.x.DecodeTrace = a.ptrace, a.dtrace
	}
	a.deadline, a.start = x.Deadline, now
	a.pl.b, a.dl.b = x.Prefill.b, x.Decode.b
	a.refs.Store(2) // this goroutine and the prefill goroutine

	a.watch = watchClient(x.ClientConn, a)
	go a.runPrefill(earlier(now.Add(a.t.PrefillFirstByte), a.deadline))

	ans, err := a.runDecode(earlier(now.Add(a.t.DecodeFirstByte), a.deadline))
	a.watch.stop()
	if err == nil {
		p.answered(a.dl.b, now)
		if ans.Stream == nil {
			p.settle(x.Decode, nil)
			a.report(&a.dl, Decode, a.stamp(), len(ans.Body), 0, nil)
		}
		return ans, nil
	}
	defer a.unref()
	switch {
	case err.Kind == KindCancelled && errors.Is(err.Err, ErrClientGone):
		a.setWhy(AbortClientGone)
		a.pl.cancel(ErrClientGone)
		p.settle(x.Decode, err)
		a.report(&a.dl, Decode, time.Time{}, 0, 0, err)
		return nil, err
	case a.state.Load() == prefillFailed:
		// The prefill failed first and cut the decode: answer its error.
		cut := &UpstreamError{Backend: a.dl.b, Kind: KindCancelled, Err: errPrefillFailed}
		p.settle(x.Decode, cut)
		a.report(&a.dl, Decode, time.Time{}, 0, 0, cut)
		return nil, <-a.pdone
	default:
		// Silent past its deadline after the prefill answered: the KV may
		// never have come. Not when the request never reached the decode
		// (its dial was cut): then the decode alone is at fault.
		if err.Kind == KindTimeout && x.Stream && a.prefillOK.Load() && a.dl.sent {
			err.AfterPrefill = true
		}
		a.setWhy(failedWhy(err, Decode))
		a.pl.cancel(errCancelled)
		p.settle(x.Decode, err)
		a.report(&a.dl, Decode, time.Time{}, 0, 0, err)
		return nil, err
	}
}

// runPrefill drives the prefill leg; on a failure before the decode has
// committed it cuts the decode leg (SGLang's own balancer leaves the decode
// waiting for KV for minutes instead).
func (a *attempt) runPrefill(firstByte time.Time) {
	l := &a.pl
	defer a.unref()
	err := l.start(a.x.Path, a.x.PrefillBody, a.x.RequestID, a.x.PrefillTrace, firstByte)
	if err == nil {
		if !l.ok() {
			err = l.statusError(a.deadline)
		}
	}
	if err == nil && !a.x.Stream {
		// The body follows the headers at once (SGLang answers when done):
		// the first-byte deadline still set on the connection covers it.
		err = l.readBody(time.Time{})
	}
	var sr *sseReader
	if err == nil && a.x.Stream {
		sr, err = a.prefillFirstEvent()
	}
	var first time.Time
	if err == nil {
		first = a.stamp()
		a.prefillOK.Store(true)
	}
	if sr == nil && a.x.Tracer != nil {
		// Before pdone: a prefill that failed first ends before its attempt.
		n := 0
		if !a.x.Stream {
			n = len(l.resp.Body()) // a stream's Body would read the stream
		}
		a.report(l, Prefill, first, n, 0, err)
	}
	a.p.settle(a.x.Prefill, err)
	if err == nil && sr == nil {
		a.p.answered(l.b, a.start)
	}
	if err != nil && a.state.CompareAndSwap(pending, prefillFailed) {
		a.setWhy(failedWhy(err, Prefill))
		a.dl.cancel(errPrefillFailed)
	}
	if err != nil && err.Kind != KindCancelled && a.state.Load() == committed {
		a.p.log.Warn().Str("prefill", l.b.URL).Str("request_id", a.x.RequestID).Err(err).Msg("prefill failed after the decode committed")
	}
	a.pdone <- err // capacity 1: never blocks
	if sr != nil {
		bytes, events, clean := drainStream(l, sr)
		if clean {
			a.p.answered(l.b, a.start)
		}
		if a.x.MergeLogprobs {
			events++ // the first, read for the merge
		}
		a.report(l, Prefill, first, bytes, events, nil)
	}
}

var errPrefillFailed = errors.New("prefill failed")

// prefillFirstEvent opens the prefill's stream and, when logprobs are
// merged, reads its first event (all the merge needs: the rest of the
// prefill stream is never buffered).
func (a *attempt) prefillFirstEvent() (*sseReader, *UpstreamError) {
	r, c, err := a.pl.openStream()
	if err != nil {
		return nil, err
	}
	sr := acquireSSEReader(r)
	if !a.x.MergeLogprobs {
		return sr, nil
	}
	c.SetReadDeadline(a.deadline)
	ev, rerr := sr.next()
	if rerr != nil {
		releaseSSEReader(sr)
		a.pl.resp.CloseBodyStream()
		return nil, a.pl.fail(KindProtocol, rerr)
	}
	if d, ok := eventData(ev); ok {
		a.pFirst = append(a.pFirst[:0], d...)
	}
	return sr, nil
}

// drainStream reads a prefill stream to its end so the engine never sees
// pdlb hang up on it (SGLang aborts a request whose client left) and the
// connection can be reused. It stops at [DONE]: engines may keep the body
// open after it. It returns the bytes and the number of the events read
// after the first (which prefillFirstEvent may have read), and whether the
// stream ended cleanly ([DONE] or the end of the body).
func drainStream(l *leg, sr *sseReader) (bytes, events int, clean bool) {
	defer releaseSSEReader(sr)
	for {
		ev, err := sr.next()
		if err != nil {
			if cancelled := l.isCancelled(); !isEOF(err) && (cancelled || classify(err) == KindTimeout) {
				l.giveUp(!cancelled)
			}
			l.closeStream(isEOF(err))
			return bytes, events, isEOF(err)
		}
		bytes += len(ev)
		events++
		if isDone(ev) {
			l.ended = true
			l.closeStream(finishAfterDone(l, sr))
			return bytes, events, true
		}
	}
}

// runDecode drives the decode leg up to its first byte: the whole answer
// for non-streaming requests, the first event for streams.
func (a *attempt) runDecode(firstByte time.Time) (*Answer, *UpstreamError) {
	l := &a.dl
	x := &a.x
	if err := l.start(x.Path, x.DecodeBody, x.RequestID, x.DecodeTrace, firstByte); err != nil {
		a.state.CompareAndSwap(pending, decodeFailed)
		return nil, err
	}
	if !l.ok() {
		err := l.statusError(firstByte)
		a.state.CompareAndSwap(pending, decodeFailed)
		return nil, err
	}
	if !x.Stream {
		if err := l.readBody(time.Time{}); err != nil {
			a.state.CompareAndSwap(pending, decodeFailed)
			return nil, err
		}
		if !a.state.CompareAndSwap(pending, committed) {
			return nil, l.fail(KindCancelled, errPrefillFailed)
		}
		return a.nonStreamAnswer(), nil
	}
	s, err := a.openDecodeStream(firstByte)
	if err != nil {
		a.state.CompareAndSwap(pending, decodeFailed)
		return nil, err
	}
	if !a.state.CompareAndSwap(pending, committed) {
		s.release(false)
		l.giveUp(false) // its engine streams on: abort it (the prefill failed)
		return nil, &UpstreamError{Backend: l.b, Kind: KindCancelled, Err: errPrefillFailed}
	}
	s.a = a
	if x.MergeLogprobs {
		// The first decode event needs the prefill's logprobs in front.
		if perr := <-a.pdone; perr == nil && len(a.pFirst) > 0 {
			if inner, ok := prefillLogprobs(a.pFirst, -1); ok {
				s.prefix = append(s.prefix[:0], inner...)
				s.merge = true
			}
		}
	}
	s.ticket = x.Decode
	s.resumable = x.Resumable && !s.merge
	s.keepLast = s.resumable
	a.ans = Answer{Status: 200, ContentType: eventStreamType, Stream: s, a: a}
	return &a.ans, nil
}

func (a *attempt) nonStreamAnswer() *Answer {
	l := &a.dl
	a.ans = Answer{Status: l.status(), ContentType: l.resp.Header.ContentType(), Body: l.resp.Body(), a: a}
	if a.x.MergeLogprobs {
		if perr := <-a.pdone; perr == nil {
			a.merged = mergeNonStream(a.merged[:0], a.ans.Body, a.pl.resp.Body())
			a.ans.Body = a.merged
		}
	}
	return &a.ans
}

var eventStreamType = []byte("text/event-stream")

func earlier(a, b time.Time) time.Time {
	if b.IsZero() || a.Before(b) {
		return a
	}
	return b
}
