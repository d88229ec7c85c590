package mock

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// KVTransfers stands in for the KV transfer between the prefill and decode
// engines of a cluster simulated in one process (Options.KVTransfers): a
// prefill records each bootstrap_room it has computed, with the prompt
// tokens it found cached, and the decode given the same room waits for that
// record before its first token, as a real decode waits for its KV. A
// prefill that fails records the failure, which the decode answers at once.
// A room recorded and never claimed (its decode was never sent, or gave up)
// is forgotten after a few minutes.
type KVTransfers struct {
	mu    sync.Mutex
	now   func() time.Time
	keep  time.Duration
	rooms map[uint64]*transfer
	done  []doneRoom // recorded rooms, oldest first, for forgetting
}

type transfer struct {
	ready  chan struct{} // closed once the prefill recorded the room
	cached int
	failed string // why the prefill did not compute it
}

type doneRoom struct {
	room uint64
	t    *transfer
	at   time.Time
}

// kvTransferKeep is how long an unclaimed room is kept.
const kvTransferKeep = 5 * time.Minute

// NewKVTransfers makes an empty table.
func NewKVTransfers() *KVTransfers {
	return &KVTransfers{now: time.Now, keep: kvTransferKeep, rooms: make(map[uint64]*transfer)}
}

// complete records that room's prefill is done, cached tokens of it found
// in the prefill's KV cache.
func (k *KVTransfers) complete(room uint64, cached int) { k.record(room, cached, "") }

// fail records that room's prefill will never be done.
func (k *KVTransfers) fail(room uint64, why string) { k.record(room, 0, why) }

func (k *KVTransfers) record(room uint64, cached int, failed string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.now()
	k.forget(now)
	t := k.rooms[room]
	if t == nil || isClosed(t.ready) {
		t = &transfer{ready: make(chan struct{})}
		k.rooms[room] = t
	}
	t.cached, t.failed = cached, failed
	close(t.ready)
	k.done = append(k.done, doneRoom{room, t, now})
}

// forget drops rooms recorded longer than keep ago and never claimed.
func (k *KVTransfers) forget(now time.Time) {
	n := 0
	for _, d := range k.done {
		if now.Sub(d.at) < k.keep {
			break
		}
		if k.rooms[d.room] == d.t {
			delete(k.rooms, d.room)
		}
		n++
	}
	k.done = k.done[n:]
}

// errKVGiveUp means the wait ended by stop or abort, not by the prefill.
var errKVGiveUp = &StatusError{Code: fasthttp.StatusServiceUnavailable, Message: "mock: request aborted"}

// errKVTimeout means the prefill did not record the room in time.
var errKVTimeout = errors.New("KV transfer timed out")

// await waits for room's record until timeout (the timer's channel fires),
// stop or abort, and claims it: the cached tokens, or the prefill's failure.
func (k *KVTransfers) await(room uint64, timeout <-chan time.Time, stop, abort <-chan struct{}) (int, error) {
	k.mu.Lock()
	t := k.rooms[room]
	if t == nil {
		t = &transfer{ready: make(chan struct{})}
		k.rooms[room] = t
	}
	k.mu.Unlock()
	var err error
	select {
	case <-t.ready:
	case <-timeout:
		err = errKVTimeout
	case <-stop:
		err = errKVGiveUp
	case <-abort:
		err = errKVGiveUp
	}
	k.mu.Lock()
	if k.rooms[room] == t {
		delete(k.rooms, room)
	}
	k.mu.Unlock()
	if err != nil {
		return 0, err
	}
	if t.failed != "" {
		return 0, errors.New(t.failed)
	}
	return t.cached, nil
}

// Pending is the number of rooms recorded and not yet claimed, plus those
// a decode waits for.
func (k *KVTransfers) Pending() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.rooms)
}

// Reset forgets the recorded rooms nobody claimed; decodes waiting keep
// waiting.
func (k *KVTransfers) Reset() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for room, t := range k.rooms {
		if isClosed(t.ready) {
			delete(k.rooms, room)
		}
	}
	k.done = nil
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// awaitKV is a decode's wait for the KV of every item, before it takes a
// place in the batch: with KVTransfers until each item's room is recorded
// (or KVWaitTimeout), filling the items' cached tokens; else
// PrefillPerToken × the prompt tokens. It counts the prompt tokens and
// cached tokens it answers for.
func (e *Engine) awaitKV(a *admitted) error {
	r := a.r
	if err := e.waitKV(a); err != nil {
		return err
	}
	e.stats.inputTokens.Add(int64(r.itemTokens()))
	for i := 0; i < r.Items; i++ {
		e.stats.cachedTokens.Add(int64(r.cachedTokens(i)))
	}
	return nil
}

func (e *Engine) waitKV(a *admitted) error {
	r := a.r
	k := e.opts.KVTransfers
	if k == nil {
		if !wait(a.timer, e.kvWaitTime(r), e.stopping(), a.abort) {
			return errKVGiveUp
		}
		return nil
	}
	tokens := int64(r.itemTokens() + r.MaxTokens*r.Items)
	e.awaiting.Add(1)
	e.awaitingTokens.Add(tokens)
	defer func() {
		e.awaiting.Add(-1)
		e.awaitingTokens.Add(-tokens)
	}()
	a.timer.Reset(e.scaled(e.opts.KVWaitTimeout))
	defer a.timer.Stop()
	for i := 0; i < r.Items; i++ {
		if item(r.BootstrapHosts, i) == fakeBootstrapHost {
			continue
		}
		room := item(r.BootstrapRooms, i)
		cached, err := k.await(room, a.timer.C, e.stopping(), a.abort)
		switch {
		case err == errKVGiveUp:
			return err
		case errors.Is(err, errKVTimeout):
			return &StatusError{Code: fasthttp.StatusInternalServerError, Message: fmt.Sprintf(
				"KV transfer of bootstrap_room %d timed out after %v waiting for its prefill", room, e.opts.KVWaitTimeout)}
		case err != nil:
			return &StatusError{Code: fasthttp.StatusInternalServerError, Message: fmt.Sprintf(
				"KV transfer of bootstrap_room %d failed: %v", room, err)}
		}
		r.setCached(i, cached)
	}
	return nil
}

// handOver tells the decodes of r's rooms that the prefill is done, or
// (why ≠ "") that it never will be.
func (e *Engine) handOver(r *Request, why string) {
	k := e.opts.KVTransfers
	if k == nil {
		return
	}
	for i := 0; i < r.Items; i++ {
		if item(r.BootstrapHosts, i) == fakeBootstrapHost {
			continue
		}
		room := item(r.BootstrapRooms, i)
		if why != "" {
			k.fail(room, "the prefill "+why)
		} else {
			k.complete(room, r.cachedTokens(i))
		}
	}
}
