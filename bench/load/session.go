package load

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// sessionLoop runs the multiturn workload. Closed loop: Sessions sessions are open at all
// times; each sends its next turn when the previous answer has come (plus ThinkTime), and
// one that ends is replaced at once. Open loop: sessions arrive at Rate per second (Poisson)
// and run the same way; an arrival that finds Sessions open is dropped, and Scheduled and
// Dropped count sessions. No turn starts after the round's Duration.
//
// Session n's system prompt, turn count, user messages and lengths are drawn from (seed, n)
// alone, and sessions are handed out in order n = 0, 1, 2, …, so what is sent depends on
// the engine's answers but not on timing or on how many sessions run at once.
func sessionLoop(ctx context.Context, t *target, plan *roundPlan, done *atomic.Int64) roundResult {
	opts := plan.opts
	src := &sessionSource{plan: plan, limit: int64(opts.Requests)}
	start := time.Now()
	deadline := time.Time{}
	if opts.Requests == 0 {
		deadline = start.Add(opts.Duration)
	}
	runners := make([]*sessionRunner, opts.Sessions)
	workers := make([]*worker, opts.Sessions)
	for i := range runners {
		workers[i] = newWorker(t, plan)
		runners[i] = &sessionRunner{w: workers[i], plan: plan, src: src, deadline: deadline, done: done}
	}
	var wg sync.WaitGroup
	if opts.Rate <= 0 {
		for _, r := range runners {
			wg.Go(func() {
				for {
					s, ok := src.take()
					if !ok {
						return
					}
					if !r.run(ctx, s, time.Now()) {
						return
					}
				}
			})
		}
		wg.Wait()
		return collect(workers, time.Since(start))
	}

	type arrival struct {
		s  sessionSpec
		at time.Time
	}
	var open atomic.Int64 // sessions handed out and not yet ended; never above the channel's capacity
	arrivals := make(chan arrival, opts.Sessions)
	for _, r := range runners {
		wg.Go(func() {
			for a := range arrivals {
				r.run(ctx, a.s, a.at)
				open.Add(-1)
			}
		})
	}
	var res roundResult
	sched := newSchedule(opts.Rate, plan.seed)
	timer := time.NewTimer(0)
	<-timer.C
	for ctx.Err() == nil {
		offset := sched.next()
		if opts.Requests == 0 && offset >= opts.Duration {
			break
		}
		at := start.Add(offset)
		if wait := time.Until(at); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
			}
		}
		if open.Load() >= int64(opts.Sessions) {
			res.scheduled++
			res.dropped++
			continue
		}
		s, ok := src.take()
		if !ok {
			break
		}
		res.scheduled++
		open.Add(1)
		arrivals <- arrival{s, at}
	}
	close(arrivals)
	wg.Wait()
	r := collect(workers, time.Since(start))
	r.scheduled, r.dropped = res.scheduled, res.dropped
	return r
}

// sessionSpec is one session as drawn: its number, random value and turns.
type sessionSpec struct {
	n     uint64
	draw  uint64
	turns int
}

// sessionSource hands out sessions in order. With a Requests limit, the last one is cut so
// that the turns handed out add up to the limit exactly, whichever runner takes which.
type sessionSource struct {
	plan  *roundPlan
	limit int64 // 0: none

	mu    sync.Mutex
	next  uint64
	turns int64 // handed out and not given back
}

func (s *sessionSource) take() (sessionSpec, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.next
	draw := splitmix64(s.plan.seed ^ splitmix64(n))
	turns := s.plan.opts.Turns.pick(draw)
	if s.limit > 0 {
		left := s.limit - s.turns
		if left <= 0 {
			return sessionSpec{}, false
		}
		turns = int(min(int64(turns), left))
	}
	s.next++
	s.turns += int64(turns)
	return sessionSpec{n: n, draw: draw, turns: turns}, true
}

// giveBack returns the turns of a session that ended early (a failed turn), so that a
// run of Requests still sends that many.
func (s *sessionSource) giveBack(turns int) {
	s.mu.Lock()
	s.turns -= int64(turns)
	s.mu.Unlock()
}

// sessionRunner runs sessions one after another with one worker and one history buffer.
type sessionRunner struct {
	w        *worker
	plan     *roundPlan
	src      *sessionSource
	deadline time.Time // zero: none
	done     *atomic.Int64
	hist     []byte // the session's prompt so far, JSON-escaped
}

// run sends the turns of session s, the first when due; it reports false when the round
// is over (ctx ended, deadline passed) and no further session should start.
func (r *sessionRunner) run(ctx context.Context, s sessionSpec, due time.Time) bool {
	opts, p := r.plan.opts, r.plan.prompts
	r.hist = append(r.hist[:0], p.system[p.zipf.rank(splitmix64(s.draw))-1]...)
	r.w.session = appendTag(r.w.session[:0], 's', r.plan.salt, s.n)
	defer func() { r.w.session = r.w.session[:0] }()
	words := p.systemLen
	for k := range s.turns {
		if ctx.Err() != nil || (!r.deadline.IsZero() && !due.Before(r.deadline)) {
			return false
		}
		if wait := time.Until(due); wait > 0 {
			if opts.sleep(ctx, wait) != nil {
				return false
			}
		}
		d := splitmix64(s.draw + 1 + uint64(k))
		inLen, outLen := opts.InputLen.pick(d), opts.OutputLen.pick(d>>32)
		r.hist = append(r.hist, ' ')
		r.hist = appendTag(r.hist, 'u', r.plan.salt, s.n, uint64(k))
		r.hist = appendFiller(r.hist, d>>16, inLen-1)
		words += inLen

		w := r.w
		w.body = append(w.body[:0], generateOpen...)
		w.body = append(w.body, r.hist...)
		w.body = appendGenerateClose(w.body, outLen, opts.Stream)
		if opts.Room {
			w.body = appendRoom(w.body, s.n<<16|uint64(k))
		}
		answer := w.send(due, int64(words))
		r.done.Add(1)
		if answer == nil {
			r.src.giveBack(s.turns - k - 1)
			return true // a failed turn ends its session: there is no answer to continue from
		}
		// The answer's text goes into the history as the engine wrote it: its JSON string
		// is valid inside ours without unescaping and escaping again.
		if text := gjson.GetBytes(answer, "text"); text.Type == gjson.String && len(text.Raw) >= 2 {
			r.hist = append(r.hist, ' ')
			r.hist = append(r.hist, text.Raw[1:len(text.Raw)-1]...)
			words += countWords(text.Str)
		}
		due = time.Now().Add(opts.ThinkTime)
	}
	return true
}

// countWords counts whitespace-separated words as strings.Fields splits them, which is
// how the simulated engines count prompt tokens.
func countWords(s string) int {
	n, inWord := 0, false
	for i := 0; i < len(s); {
		c, size := rune(s[i]), 1
		if c >= utf8.RuneSelf {
			c, size = utf8.DecodeRuneInString(s[i:])
		}
		i += size
		if unicode.IsSpace(c) {
			inWord = false
		} else if !inWord {
			inWord, n = true, n+1
		}
	}
	return n
}

// HeaderSessionID carries a multiturn session's identity on each of its
// requests, as chat frontends send one, so that a balancer's sticky policy
// (pdlb's consistent_hashing, header X-Session-ID) can keep a session on one
// engine.
const HeaderSessionID = "X-Session-ID"
