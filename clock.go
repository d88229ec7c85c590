package pdlb

import (
	"context"
	"time"
)

// SleepFunc waits d or until ctx is done. Injected everywhere pdlb waits,
// so tests can record delays instead of spending them.
type SleepFunc func(ctx context.Context, d time.Duration) error

// Clock is the time source of everything time-dependent in pdlb (the
// request path's deadlines and retry backoff, the registry's expiry, the
// registration client's backoff). Zero fields fall back to the system clock.
type Clock struct {
	// Now returns the current time. Default time.Now.
	Now func() time.Time
	// Sleep waits. Default SleepContext.
	Sleep SleepFunc
}

// SystemClock is the real clock.
func SystemClock() Clock { return Clock{Now: time.Now, Sleep: SleepContext} }

// OrSystem fills zero fields with the system clock.
func (c Clock) OrSystem() Clock {
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Sleep == nil {
		c.Sleep = SleepContext
	}
	return c
}

// SleepContext sleeps for d or until ctx is done, whichever comes first; it
// returns ctx.Err() when the context ended the wait.
func SleepContext(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
