package mock

import (
	"sync/atomic"
	"time"
)

// scheduler bounds how many requests the engine serves at once (MaxBatch),
// like an engine's running batch; the rest wait in FIFO order (a channel's
// blocked senders are served first come, first served).
type scheduler struct {
	slots    chan struct{} // nil: unlimited
	inFlight atomic.Int64
	peak     atomic.Int64
	queued   atomic.Int64
}

func (s *scheduler) init(maxBatch int) {
	if maxBatch > 0 {
		s.slots = make(chan struct{}, maxBatch)
	}
}

// acquire takes a batch slot, waiting while the batch is full; it gives up
// (false) when stop or abort closes first.
func (s *scheduler) acquire(stop, abort <-chan struct{}) bool {
	if s.slots != nil {
		select {
		case s.slots <- struct{}{}:
		default:
			s.queued.Add(1)
			select {
			case s.slots <- struct{}{}:
				s.queued.Add(-1)
			case <-stop:
				s.queued.Add(-1)
				return false
			case <-abort:
				s.queued.Add(-1)
				return false
			}
		}
	}
	n := s.inFlight.Add(1)
	for {
		p := s.peak.Load()
		if n <= p || s.peak.CompareAndSwap(p, n) {
			break
		}
	}
	return true
}

func (s *scheduler) release() {
	s.inFlight.Add(-1)
	if s.slots != nil {
		<-s.slots
	}
}

// prefillTime is how long the engine works before the first output token.
func (e *Engine) prefillTime(r *Request) time.Duration {
	return time.Duration(r.totalPromptTokens()) * e.opts.PrefillPerToken
}

// decodeTime is how long a plain (non-stream) answer takes to generate:
// items decode side by side, so it is one item's worth.
func (e *Engine) decodeTime(r *Request) time.Duration {
	return time.Duration(r.MaxTokens) * e.opts.DecodePerToken
}

// tokenGap is the pause between stream events.
func (e *Engine) tokenGap() time.Duration {
	if e.opts.DecodePerToken > 0 {
		return e.opts.DecodePerToken
	}
	return e.opts.TokenDelay
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
