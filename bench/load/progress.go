package load

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progress drives a terminal progress bar from a counter the loops bump, redrawn on a
// ticker so that the hot path pays one atomic add per request and never the bar's lock.
type progress struct {
	bar      *progressbar.ProgressBar
	done     atomic.Int64 // requests finished (answered, failed or dropped) this round
	byTime   bool         // Duration rounds advance by the clock, Requests rounds by count
	perRound int64        // bar units per round: requests, or milliseconds
	duration time.Duration

	mu      sync.Mutex
	rounds  int64 // rounds finished
	started time.Time
	stop    chan struct{}
	stopped chan struct{}
}

// newProgress returns a progress that draws on w only when w is a terminal.
func newProgress(w io.Writer, opts *Options, targets int) *progress {
	p := &progress{byTime: opts.Requests == 0, duration: opts.Duration}
	p.perRound = int64(opts.Requests)
	if p.byTime {
		p.perRound = opts.Duration.Milliseconds()
	}
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return p
	}
	total := p.perRound * int64(opts.Rounds*targets)
	p.bar = progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionClearOnFinish(),
	)
	p.stop, p.stopped = make(chan struct{}), make(chan struct{})
	go p.redraw()
	return p
}

// startRound resets the per-round counter and names the round on the bar.
func (p *progress) startRound(round, rounds int, label, url string) {
	p.done.Store(0)
	if p.bar == nil {
		return
	}
	p.mu.Lock()
	p.started = time.Now()
	p.mu.Unlock()
	p.bar.Describe(fmt.Sprintf("round %d/%d %s %s", round+1, rounds, label, url))
}

func (p *progress) endRound() {
	p.mu.Lock()
	p.rounds++
	p.started = time.Now() // until the next round starts, it shows no progress of its own
	p.done.Store(0)
	p.mu.Unlock()
}

func (p *progress) redraw() {
	defer close(p.stopped)
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		p.mu.Lock()
		v := p.rounds * p.perRound
		if p.byTime {
			v += min(time.Since(p.started), p.duration).Milliseconds()
		} else {
			v += min(p.done.Load(), p.perRound)
		}
		p.mu.Unlock()
		_ = p.bar.Set64(v)
	}
}

func (p *progress) finish() {
	if p.bar == nil {
		return
	}
	close(p.stop)
	<-p.stopped
	_ = p.bar.Finish()
}
