package mock

import (
	"sync"
	"sync/atomic"
	"time"
)

// The latency model. Every delay below is multiplied by Options.TimeScale.
//
//   - A prefill engine computes at most PrefillSlots prefills at once (a GPU
//     runs about one at a time); the others wait in FIFO order. A prefill
//     takes PrefillOverhead + PrefillPerToken × the prompt tokens its KV
//     cache does not hold.
//   - A decode engine first waits for the KV: with KVTransfers, until its
//     room's prefill is done; else PrefillPerToken × the prompt tokens. It
//     then waits for a place in its batch (MaxBatch, FIFO), and produces
//     each output token in DecodePerToken + DecodePerTokenPerBatch × the
//     requests decoding on it at that moment.
//
// A request holds a batch place on either role while the engine answers it.

// scheduler is a set of slots (the batch, or the prefill slots) with a FIFO
// queue: a channel's blocked senders are served first come, first served.
type scheduler struct {
	slots    chan struct{} // nil: unlimited
	inFlight atomic.Int64
	peak     atomic.Int64
	queued   atomic.Int64
	peakQ    atomic.Int64
	// tokens held by running requests and by queued ones (the load report)
	heldTokens, queuedTokens atomic.Int64
	occ                      occupancy
}

func (s *scheduler) init(n int, now func() time.Time) {
	if n > 0 {
		s.slots = make(chan struct{}, n)
	}
	s.occ.init(now)
}

// acquire takes a slot for a request of tokens tokens, waiting while all are
// taken; it gives up (false) when stop or abort closes first.
func (s *scheduler) acquire(stop, abort <-chan struct{}, tokens int64) bool {
	if s.slots != nil {
		select {
		case s.slots <- struct{}{}:
		default:
			raise(&s.peakQ, s.queued.Add(1))
			s.queuedTokens.Add(tokens)
			ok := true
			select {
			case s.slots <- struct{}{}:
			case <-stop:
				ok = false
			case <-abort:
				ok = false
			}
			s.queued.Add(-1)
			s.queuedTokens.Add(-tokens)
			if !ok {
				return false
			}
		}
	}
	raise(&s.peak, s.inFlight.Add(1))
	s.heldTokens.Add(tokens)
	s.occ.add(1)
	return true
}

func (s *scheduler) release(tokens int64) {
	s.occ.add(-1)
	s.heldTokens.Add(-tokens)
	s.inFlight.Add(-1)
	if s.slots != nil {
		<-s.slots
	}
}

// snapshot is the slots' occupancy since start or reset.
func (s *scheduler) snapshot() Occupancy {
	o := s.occ.snapshot()
	o.Running, o.Queued = s.inFlight.Load(), s.queued.Load()
	o.PeakRunning, o.PeakQueued = s.peak.Load(), s.peakQ.Load()
	return o
}

// reset starts a new window: time integrals from zero, peaks from now.
func (s *scheduler) reset() {
	s.occ.reset()
	s.peak.Store(s.inFlight.Load())
	s.peakQ.Store(s.queued.Load())
}

// raise makes p at least v.
func raise(p *atomic.Int64, v int64) {
	for {
		cur := p.Load()
		if v <= cur || p.CompareAndSwap(cur, v) {
			return
		}
	}
}

// Occupancy is how busy a set of slots was over a window (since New or
// ResetStats): for a prefill engine its prefill slots, for both roles the
// batch.
type Occupancy struct {
	// Window is the time the figures cover.
	Window time.Duration
	// Busy is the part of Window with at least one slot held; Held adds up
	// the time each slot was held, so Held ÷ Window is the mean number held.
	Busy, Held time.Duration
	// Running and Queued are the requests holding a slot and waiting for one
	// now; PeakRunning and PeakQueued the most at once during the window.
	Running, Queued, PeakRunning, PeakQueued int64
}

// occupancy integrates the number of slots held over time.
type occupancy struct {
	mu          sync.Mutex
	now         func() time.Time
	held        int64
	start, last time.Time
	busy, sum   time.Duration
}

func (o *occupancy) init(now func() time.Time) {
	o.now = now
	o.start = now()
	o.last = o.start
}

// add changes the number held by delta at the current time.
func (o *occupancy) add(delta int64) {
	o.mu.Lock()
	o.advance(o.now())
	o.held += delta
	o.mu.Unlock()
}

// advance accounts for the time since the last change.
func (o *occupancy) advance(t time.Time) {
	if d := t.Sub(o.last); d > 0 {
		if o.held > 0 {
			o.busy += d
			o.sum += time.Duration(o.held) * d
		}
		o.last = t
	}
}

func (o *occupancy) snapshot() Occupancy {
	o.mu.Lock()
	defer o.mu.Unlock()
	t := o.now()
	o.advance(t)
	return Occupancy{Window: t.Sub(o.start), Busy: o.busy, Held: o.sum}
}

func (o *occupancy) reset() {
	o.mu.Lock()
	o.start = o.now()
	o.last = o.start
	o.busy, o.sum = 0, 0
	o.mu.Unlock()
}

// scaled applies TimeScale to a modelled delay.
func (e *Engine) scaled(d time.Duration) time.Duration {
	if e.opts.TimeScale == 1 {
		return d
	}
	return time.Duration(float64(d) * e.opts.TimeScale)
}

// prefillDuration is the compute time of a prefill of uncached tokens.
func (e *Engine) prefillDuration(uncached int) time.Duration {
	return e.scaled(e.opts.PrefillOverhead + time.Duration(uncached)*e.opts.PrefillPerToken)
}

// computesPrefill reports whether a prefill takes any time, hence a slot.
func (e *Engine) computesPrefill() bool {
	return e.opts.PrefillPerToken > 0 || e.opts.PrefillOverhead > 0
}

// kvWaitTime is how long a decode without KVTransfers waits for the KV:
// as long as its prompts would take to prefill, none of it cached.
func (e *Engine) kvWaitTime(r *Request) time.Duration {
	return e.scaled(time.Duration(r.totalPromptTokens()) * e.opts.PrefillPerToken)
}

// decodeModelled reports whether the model gives output tokens a time.
func (e *Engine) decodeModelled() bool {
	return e.opts.DecodePerToken > 0 || e.opts.DecodePerTokenPerBatch > 0
}

// decodeGap is the time of one output token now: DecodePerToken, plus
// DecodePerTokenPerBatch for each request decoding on the engine.
func (e *Engine) decodeGap() time.Duration {
	return e.scaled(e.opts.DecodePerToken + time.Duration(e.sched.inFlight.Load())*e.opts.DecodePerTokenPerBatch)
}

// tokenGap is the pause between stream events: the decode model's, else
// TokenDelay.
func (e *Engine) tokenGap() time.Duration {
	if e.decodeModelled() {
		return e.decodeGap()
	}
	return e.scaled(e.opts.TokenDelay)
}

// decodeSegment is how many tokens a plain answer decodes between two looks
// at the batch size: the time per token follows the batch as it changes,
// for a handful of timers per request rather than one per token.
const decodeSegment = 16

// decode plays the decode time of a plain answer of n tokens per item
// (items decode side by side); false when stop or abort came first.
func (e *Engine) decode(a *admitted, n int) bool {
	if !e.decodeModelled() {
		return wait(a.timer, 0, e.stopping(), a.abort)
	}
	for n > 0 {
		k := min(n, decodeSegment)
		if !wait(a.timer, time.Duration(k)*e.decodeGap(), e.stopping(), a.abort) {
			return false
		}
		n -= k
	}
	return true
}

// wait sleeps d unless stop or abort closes first (then false).
func wait(t *time.Timer, d time.Duration, stop, abort <-chan struct{}) bool {
	if d <= 0 {
		select {
		case <-stop:
			return false
		case <-abort:
			return false
		default:
			return true
		}
	}
	t.Reset(d)
	select {
	case <-t.C:
		return true
	case <-stop:
		t.Stop()
		return false
	case <-abort:
		t.Stop()
		return false
	}
}
