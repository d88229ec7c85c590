package service

import (
	"context"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"pdlb"
	"pdlb/bootstrap"
	"pdlb/bootstrap/etcdstore"
	"pdlb/proxy"
)

// forgetter carries out bootstrap.forget_after: a prefill whose health
// checks have failed, without a pass, for that long has its registry
// namespace reset, so that when it restarts it may register another
// topology. One pdlb resets its own namespace; a replica of a cluster
// votes, and the namespace goes when every live replica has voted (see
// etcdstore.Replica.Vote). Either way a namespace written since the
// failures began (the prefill came back and registered) is kept.
type forgetter struct {
	after   time.Duration
	reg     *bootstrap.Registry
	replica *etcdstore.Replica // nil: one pdlb
	timeout time.Duration
	clock   pdlb.Clock
	log     zerolog.Logger

	mu     sync.Mutex
	spells map[int]*spell // by bootstrap port
	wg     sync.WaitGroup
	cancel context.CancelFunc
}

// spell is one prefill's run of failed health checks.
type spell struct {
	since time.Time
	mark  bootstrap.Mark
	voted bool
	done  bool // reset, or nothing to reset: this spell is settled
}

func newForgetter(after time.Duration, reg *bootstrap.Registry, replica *etcdstore.Replica, timeout time.Duration, clock pdlb.Clock, log zerolog.Logger) *forgetter {
	return &forgetter{after: after, reg: reg, replica: replica, timeout: timeout, clock: clock.OrSystem(),
		log: log.With().Str("component", "bootstrap").Logger(), spells: map[int]*spell{}}
}

// observe takes one health-check result (the checker's OnResult).
func (f *forgetter) observe(b *proxy.Backend, ok bool) {
	if f == nil || b.Role != proxy.Prefill {
		return
	}
	port := b.Bootstrap().Listen
	f.mu.Lock()
	defer f.mu.Unlock()
	sp := f.spells[port]
	switch {
	case ok && sp != nil:
		delete(f.spells, port)
		if sp.voted {
			f.wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
				defer cancel()
				if err := f.replica.Unvote(ctx, port); err != nil {
					f.log.Warn().Err(err).Int("bootstrap_port", port).Msg("could not withdraw this replica's vote to forget a prefill (its lease ends it)")
				}
			})
		}
	case !ok && sp == nil:
		if m, found := f.reg.MarkOf(port); found {
			f.spells[port] = &spell{since: f.clock.Now(), mark: m}
		}
	}
}

// start checks the spells every second until stop.
func (f *forgetter) start() {
	if f == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	f.wg.Go(func() {
		for f.clock.Sleep(ctx, time.Second) == nil {
			f.check(ctx)
		}
	})
}

func (f *forgetter) stop() {
	if f == nil || f.cancel == nil {
		return
	}
	f.cancel()
	f.wg.Wait()
}

// check acts on the spells that reached forget_after.
func (f *forgetter) check(ctx context.Context) {
	now := f.clock.Now()
	type due struct {
		port int
		sp   spell
	}
	var list []due
	f.mu.Lock()
	for port, sp := range f.spells {
		if !sp.done && now.Sub(sp.since) >= f.after {
			list = append(list, due{port, *sp})
		}
	}
	f.mu.Unlock()
	for _, d := range list {
		settled, voted := f.forget(ctx, d.port, d.sp, now)
		f.mu.Lock()
		if sp := f.spells[d.port]; sp != nil && sp.since == d.sp.since {
			sp.done, sp.voted = settled, sp.voted || voted
		}
		f.mu.Unlock()
	}
}

// forget resets (or votes to reset) one namespace; settled means there is
// nothing more to do in this spell.
func (f *forgetter) forget(ctx context.Context, port int, sp spell, now time.Time) (settled, voted bool) {
	failing := now.Sub(sp.since).Round(time.Second)
	if f.replica == nil {
		if n := f.reg.ForgetUnchanged(port, sp.mark); n >= 0 {
			f.log.Warn().Int("bootstrap_port", port).Int("dropped_ranks", n).Dur("failing_for", failing).
				Msg("bootstrap namespace reset: its prefill failed every health check for bootstrap.forget_after")
		}
		return true, false
	}
	if sp.mark.Rev == 0 {
		return true, false // nothing was stored when the failures began
	}
	vctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	reset, err := f.replica.Vote(vctx, port, sp.mark.Rev)
	if err != nil {
		f.log.Warn().Err(err).Int("bootstrap_port", port).Msg("could not vote to forget a prefill in etcd; trying again")
		return false, false
	}
	if reset {
		f.log.Warn().Int("bootstrap_port", port).Dur("failing_for", failing).
			Msg("bootstrap namespace reset for every replica: its prefill failed every replica's health checks for bootstrap.forget_after")
		return true, true
	}
	return false, true
}
