package proxy

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/sony/gobreaker/v2"

	"pdlb/config"
)

// Breaker is one backend's circuit breaker: gobreaker's two-step breaker,
// with a lock-free mirror of its state so selection can skip open breakers
// without taking gobreaker's mutex for every candidate.
type Breaker struct {
	cb      *gobreaker.TwoStepCircuitBreaker[struct{}]
	timeout time.Duration
	// state mirrors gobreaker's state; openedAt (unix nanos) is when it last opened.
	state    atomic.Int32
	openedAt atomic.Int64
	lastErr  atomic.Pointer[string]
}

// errExcluded marks an outcome the breaker must not count (pdlb cancelled the leg).
var errExcluded = errors.New("excluded from breaker counts")

// NewBreaker builds a breaker from the config's trip rule (a validated
// config: breaker.open_timeout > 0). name is used in logs.
func NewBreaker(name string, c config.Breaker, log zerolog.Logger, onChange func(name string, from, to gobreaker.State)) *Breaker {
	b := &Breaker{timeout: c.OpenTimeout} // > 0: config validation (gobreaker would take 0 as its own 60 s)
	st := gobreaker.Settings{
		Name:        name,
		MaxRequests: c.HalfOpenMaxRequests,
		Interval:    c.Window,
		Timeout:     b.timeout,
		ReadyToTrip: func(n gobreaker.Counts) bool {
			if c.ConsecutiveFailures > 0 && n.ConsecutiveFailures >= c.ConsecutiveFailures {
				return true
			}
			// Legs pdlb cut itself are excluded outcomes, but gobreaker
			// still counts them in Requests: they are no request of the
			// backend's, neither towards min_requests nor in the ratio.
			counted := n.Requests - min(n.TotalExclusions, n.Requests)
			return c.FailureRatio > 0 && counted >= c.MinRequests && counted > 0 &&
				float64(n.TotalFailures)/float64(counted) >= c.FailureRatio
		},
		IsExcluded: func(err error) bool { return errors.Is(err, errExcluded) },
		OnStateChange: func(name string, from, to gobreaker.State) {
			b.state.Store(int32(to))
			if to == gobreaker.StateOpen {
				b.openedAt.Store(time.Now().UnixNano())
			}
			cause := ""
			if p := b.lastErr.Load(); p != nil {
				cause = *p
			}
			ev := log.Warn()
			if to == gobreaker.StateClosed {
				ev = log.Info()
			}
			ev.Str("backend", name).Str("from", from.String()).Str("to", to.String()).Str("cause", cause).Msg("circuit breaker state changed")
			if onChange != nil {
				onChange(name, from, to)
			}
		},
	}
	if c.Window > 0 {
		st.BucketPeriod = c.Window / 10
	}
	b.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](st)
	return b
}

// State is the breaker's current state ("closed", "half-open", "open").
func (b *Breaker) State() gobreaker.State { return b.cb.State() }

// OpenUntil is when an open breaker admits its first half-open probe
// (zero while it is not open), for operators watching it.
func (b *Breaker) OpenUntil() time.Time {
	if gobreaker.State(b.state.Load()) != gobreaker.StateOpen {
		return time.Time{}
	}
	return time.Unix(0, b.openedAt.Load()).Add(b.timeout)
}

// mayAllow is the lock-free pre-check used by selection: an open breaker is
// skipped until its timeout has passed (then Allow moves it to half-open).
func (b *Breaker) mayAllow(now time.Time) bool {
	if gobreaker.State(b.state.Load()) != gobreaker.StateOpen {
		return true
	}
	return now.UnixNano()-b.openedAt.Load() >= int64(b.timeout)
}

// allow asks gobreaker for admission; the returned func reports the outcome.
func (b *Breaker) allow() (func(error), error) {
	return b.cb.Allow()
}

// record reports an outcome through done, remembering the cause for the
// state-change log line.
func (b *Breaker) record(done func(error), err error) {
	if err != nil && !errors.Is(err, errExcluded) {
		msg := err.Error()
		b.lastErr.Store(&msg)
	}
	done(err)
}

// SetBreaker attaches (or, on reload, replaces; nil removes) the backend's
// circuit breaker. Requests admitted by the old one report to the old one.
func (b *Backend) SetBreaker(br *Breaker) { b.breaker.Store(br) }
