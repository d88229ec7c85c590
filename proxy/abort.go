package proxy

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"pdlb/config"
)

// An engine keeps working on a request whose connection pdlb closed until
// it notices (SGLang polls for a gone client; a decode waiting for KV may
// not look for minutes). So when pdlb gives a leg up — its sibling failed,
// the client left, a deadline passed — it also names the leg's rid in
// SGLang's POST /abort_request {"rid": "…"} (http_server.py; the tokenizer
// manager takes one rid string, ignores one it does not know, answers 200
// with no body). Aborts run on goroutines of their own, after the
// request's answer is decided: they never delay it.

// AbortReason says why pdlb aborted a leg inside its engine.
type AbortReason uint8

const (
	// AbortPrefillFailed: the prefill leg failed, so its decode was cut.
	AbortPrefillFailed AbortReason = iota + 1
	// AbortDecodeFailed: the decode leg failed, so its prefill was cut.
	AbortDecodeFailed
	// AbortClientGone: the client disconnected.
	AbortClientGone
	// AbortTimeout: a deadline passed (a leg's first byte, the stream's
	// idle time, timeouts.request).
	AbortTimeout
)

func (r AbortReason) String() string {
	switch r {
	case AbortPrefillFailed:
		return "prefill_failed"
	case AbortDecodeFailed:
		return "decode_failed"
	case AbortClientGone:
		return "client_gone"
	case AbortTimeout:
		return "timeout"
	}
	return "unknown"
}

// AbortResult says what became of one abort (one rid).
type AbortResult uint8

const (
	// AbortOK: the engine answered 2xx.
	AbortOK AbortResult = iota + 1
	// AbortNotFound: the engine answered 404: it has no such route, and
	// is not asked again for abortRouteMemory.
	AbortNotFound
	// AbortError: another status, a connection error or abort.timeout.
	AbortError
	// AbortDropped: abort.max_in_flight aborts were already being sent.
	AbortDropped
	// AbortSkipped: the engine is remembered to lack the route.
	AbortSkipped
	// AbortUnauthorized: the engine refused pdlb's credentials (401):
	// upstream_auth lacks its --admin-api-key (or --api-key). The engine is
	// not asked again for abortAuthMemory.
	AbortUnauthorized
)

func (r AbortResult) String() string {
	switch r {
	case AbortOK:
		return "ok"
	case AbortNotFound:
		return "not_found"
	case AbortError:
		return "error"
	case AbortDropped:
		return "dropped"
	case AbortSkipped:
		return "skipped"
	case AbortUnauthorized:
		return "unauthorized"
	}
	return "unknown"
}

// AbortObserver hears what became of aborts: router.Metrics counts them
// (pdlb_aborts_total). n is the number of rids with that result. It runs
// on the abort's goroutine, or the request's for dropped and skipped ones.
type AbortObserver interface {
	Aborted(b *Backend, why AbortReason, result AbortResult, n int)
}

// abortRouteMemory is how long an engine that answered 404 to
// /abort_request is not asked again. Not for ever: an engine upgraded in
// place keeps its URL (and its Backend), and would never be aborted once
// it has the route; a backend removed and added again is a new Backend and
// is asked at once. One wasted request per engine per period is the cost.
const abortRouteMemory = 10 * time.Minute

// abortAuthMemory is how long an engine that refused an abort for pdlb's
// credentials (401) is not asked again: every failed or cancelled request
// would otherwise send it one more abort and log one more warning; a
// reload that fixes upstream_auth is in force for aborts within a minute.
const abortAuthMemory = time.Minute

// aborter sends the aborts of one Proxy.
type aborter struct {
	cfg atomic.Pointer[config.Abort]
	// now tells the time of the 404 memory (SetAbortClock); the aborts'
	// own timeouts are network deadlines, on the Proxy's clock.
	now      func() time.Time
	inFlight atomic.Int64
	obs      AbortObserver
	// running counts the goroutines sending aborts; idle is closed when it
	// drops to 0 (a WaitGroup must not be waited on while it may grow).
	mu      sync.Mutex
	running int
	idle    chan struct{}
}

func (ab *aborter) started() {
	ab.mu.Lock()
	if ab.running == 0 {
		ab.idle = make(chan struct{})
	}
	ab.running++
	ab.mu.Unlock()
}

func (ab *aborter) ended() {
	ab.mu.Lock()
	ab.running--
	if ab.running == 0 {
		close(ab.idle)
		ab.idle = nil
	}
	ab.mu.Unlock()
}

// SetAbort puts abort settings in force (hot reload): aborts already
// started keep theirs.
func (p *Proxy) SetAbort(c config.Abort) { p.aborts.cfg.Store(&c) }

// SetAbortClock sets the clock of the memory of engines without the
// abort route (default time.Now). Call it before serving.
func (p *Proxy) SetAbortClock(now func() time.Time) { p.aborts.now = now }

// SetAbortObserver sets who hears about aborts (nil: nobody). Call it
// before serving.
func (p *Proxy) SetAbortObserver(o AbortObserver) { p.aborts.obs = o }

// AbortsInFlight is the number of abort requests being sent.
func (p *Proxy) AbortsInFlight() int64 { return p.aborts.inFlight.Load() }

// WaitAborts waits until the aborts being sent are done (each is bounded
// by abort.timeout), or done closes; false when done came first.
func (p *Proxy) WaitAborts(done <-chan struct{}) bool {
	p.aborts.mu.Lock()
	idle := p.aborts.idle
	p.aborts.mu.Unlock()
	if idle == nil {
		return true
	}
	select {
	case <-idle:
		return true
	case <-done:
		return false
	}
}

func (p *Proxy) observeAbort(b *Backend, why AbortReason, res AbortResult, n int) {
	if o := p.aborts.obs; o != nil && n > 0 {
		o.Aborted(b, why, res, n)
	}
}

// abort sends b one /abort_request per rid of the leg, rid being the rid
// member's JSON value (a string, or a list of strings) and items, when rid
// is one string on a batch, the batch's size (SGLang names item i
// "<rid>_<i>"). It returns at once; rid is copied. sent, when set, is
// held until the aborts are done.
func (p *Proxy) abort(b *Backend, why AbortReason, rid []byte, items int, sent *sync.WaitGroup) {
	cfg := p.aborts.cfg.Load()
	if cfg == nil || !cfg.Enabled || len(rid) == 0 {
		return
	}
	bodies := abortBodies(rid, items)
	n := len(bodies)
	if n == 0 {
		return
	}
	if until := b.noAbortUntil.Load(); until != 0 && p.aborts.now().UnixNano() < until {
		p.observeAbort(b, why, AbortSkipped, n)
		return
	}
	// One slot per rid: a batch of 64 items is 64 requests to the engine.
	if p.aborts.inFlight.Add(int64(n)) > int64(cfg.MaxInFlight) {
		p.aborts.inFlight.Add(-int64(n))
		p.observeAbort(b, why, AbortDropped, n)
		return
	}
	p.aborts.started()
	if sent != nil {
		sent.Add(1)
	}
	go p.sendAborts(b, why, bodies, p.now().Add(cfg.Timeout), sent)
}

// sendAborts sends the bodies one after the other before deadline.
func (p *Proxy) sendAborts(b *Backend, why AbortReason, bodies [][]byte, deadline time.Time, sent *sync.WaitGroup) {
	defer p.aborts.ended()
	if sent != nil {
		defer sent.Done()
	}
	defer p.aborts.inFlight.Add(-int64(len(bodies)))
	for i, body := range bodies {
		left := deadline.Sub(p.now())
		res := AbortError
		if left > 0 {
			res = p.sendAbort(b, body, left)
		}
		p.observeAbort(b, why, res, 1)
		if memory := abortMemory(res); memory > 0 {
			b.noAbortUntil.Store(p.aborts.now().Add(memory).UnixNano())
			p.observeAbort(b, why, AbortSkipped, len(bodies)-i-1)
			return
		}
	}
}

// abortMemory is how long an engine that answered res is not asked again
// (0: it is asked at the next abort).
func abortMemory(res AbortResult) time.Duration {
	switch res {
	case AbortNotFound:
		return abortRouteMemory
	case AbortUnauthorized:
		return abortAuthMemory
	}
	return 0
}

func (p *Proxy) sendAbort(b *Backend, body []byte, timeout time.Duration) AbortResult {
	res, err := b.CallAsAdmin(fasthttp.MethodPost, abortPath, body, timeout)
	switch {
	case err != nil:
		p.log.Debug().Str("backend", b.URL).Err(err).Msg("abort failed")
		return AbortError
	case res.Status == fasthttp.StatusNotFound:
		p.log.Info().Str("backend", b.URL).Dur("for", abortRouteMemory).Msg("engine has no " + abortPath + ": not aborting there")
		return AbortNotFound
	case res.Status == fasthttp.StatusUnauthorized:
		p.log.Warn().Str("backend", b.URL).Dur("not_asked_for", abortAuthMemory).
			Msg("engine refused pdlb's abort for its credentials: set upstream_auth.admin_api_key to the engines' --admin-api-key (or api_key to their --api-key)")
		return AbortUnauthorized
	case res.Status < 200 || res.Status > 299:
		p.log.Debug().Str("backend", b.URL).Int("status", res.Status).Bytes("answer", capBytes(res.Body, 256)).Msg("abort refused")
		return AbortError
	}
	return AbortOK
}

const abortPath = "/abort_request"

// abortBodies renders one {"rid":…} body per rid named by raw (see abort);
// nil when raw is neither a JSON string nor a list of them.
func abortBodies(raw []byte, items int) [][]byte {
	i := skipWS(raw, 0)
	if i == len(raw) {
		return nil
	}
	if raw[i] == '"' {
		end, ok := stringEnd(raw, i)
		if !ok || skipWS(raw, end) != len(raw) {
			return nil
		}
		s := raw[i:end]
		if items <= 0 {
			return [][]byte{ridBody(s, -1)}
		}
		out := make([][]byte, items)
		for k := range out {
			out[k] = ridBody(s, k)
		}
		return out
	}
	if raw[i] != '[' {
		return nil
	}
	var out [][]byte
	i = skipWS(raw, i+1)
	if i < len(raw) && raw[i] == ']' {
		return nil
	}
	for i < len(raw) {
		if raw[i] != '"' {
			return nil
		}
		end, ok := stringEnd(raw, i)
		if !ok {
			return nil
		}
		out = append(out, ridBody(raw[i:end], -1))
		i = skipWS(raw, end)
		if i == len(raw) {
			return nil
		}
		if raw[i] == ']' {
			if skipWS(raw, i+1) != len(raw) {
				return nil
			}
			return out
		}
		if raw[i] != ',' {
			return nil
		}
		i = skipWS(raw, i+1)
	}
	return nil
}

// ridBody renders {"rid":s}, s a JSON string with its quotes; item >= 0
// names the batch item: "<s>_<item>".
func ridBody(s []byte, item int) []byte {
	b := make([]byte, 0, len(s)+16)
	b = append(b, `{"rid":`...)
	if item < 0 {
		b = append(b, s...)
	} else {
		b = append(b, s[:len(s)-1]...)
		b = append(b, '_')
		b = strconv.AppendUint(b, uint64(item), 10)
		b = append(b, '"')
	}
	return append(b, '}')
}

// stringEnd returns the index just past the JSON string starting at
// raw[i] (a quote), and whether it is one that ends before raw does.
func stringEnd(raw []byte, i int) (int, bool) {
	for j := i + 1; j < len(raw); j++ {
		switch c := raw[j]; {
		case c == '\\':
			j++
			if j == len(raw) {
				return 0, false
			}
			switch raw[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if j+4 >= len(raw) || !isHex4(raw[j+1:j+5]) {
					return 0, false
				}
				j += 4
			default:
				return 0, false
			}
		case c == '"':
			return j + 1, true
		case c < 0x20:
			return 0, false
		}
	}
	return 0, false
}

func isHex4(b []byte) bool {
	for _, c := range b {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

func skipWS(raw []byte, i int) int {
	for i < len(raw) && (raw[i] == ' ' || raw[i] == '\t' || raw[i] == '\n' || raw[i] == '\r') {
		i++
	}
	return i
}
