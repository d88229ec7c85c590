package mock

import (
	"sync"
	"sync/atomic"
)

// recentBodies is how many request bodies Stats keeps.
const recentBodies = 64

// Stats is a snapshot of what an engine saw, for tests to assert on.
type Stats struct {
	// Requests counts requests by path ("(unknown)" for unknown paths).
	Requests map[string]int64
	// LastPath and LastBody are the most recent POST/PUT request (a copy).
	LastPath string
	LastBody []byte
	// Bodies are the most recent POST/PUT requests, oldest first (up to 64; copies).
	Bodies []RecordedBody
	// InFlight is the number of generation requests holding a batch slot now;
	// MaxInFlight the most there were at once since New or ResetStats;
	// Queued those waiting for one.
	InFlight, MaxInFlight, Queued int64
	// Streams is the number of stream bodies being written now (kept-open
	// ones included); it drops when a stream ends or sees its client leave.
	Streams int64
	// Injected counts injected errors, Stalls stalled requests, Deaths
	// connections closed on purpose.
	Injected, Stalls, Deaths int64
	// Aborted lists the rids /abort_request received, in order.
	Aborted []string
	// OutputTokens counts generated tokens.
	OutputTokens int64
	// InputTokens counts the prompt tokens of the requests computed (a
	// prefill) or answered (a decode), item by item; CachedTokens those of
	// them a KV cache held: the prefill's own, or for a decode with
	// KVTransfers its prefills'. BestCachedTokens (a prefill with
	// Options.Seen) counts those any earlier request to the cluster's
	// prefills had: CachedTokens ÷ InputTokens is the hit rate,
	// BestCachedTokens ÷ InputTokens its upper bound.
	InputTokens, CachedTokens, BestCachedTokens int64
	// KVCacheTokens is how many tokens the KV cache holds now.
	KVCacheTokens int64
	// Batch is the batch's occupancy (the figures above InFlight,
	// MaxInFlight and Queued come from it), PrefillSlots that of a prefill
	// engine's prefill slots.
	Batch, PrefillSlots Occupancy
	// AwaitingKV is the number of decode requests waiting for their KV.
	AwaitingKV int64
	// Rooms are the most recent bootstrap rooms handled (up to 64), oldest
	// first: the DP rank a prefill dispatched each to, or the prefill DP rank
	// a decode with Options.Lookup resolved (other decodes record none).
	Rooms []RoomRecord
	// Registered is true once every rank of a prefill registered with
	// Options.Bootstrap; RegistrationFailed once registration gave up.
	Registered, RegistrationFailed bool
}

// RecordedBody is one request body the engine received.
type RecordedBody struct {
	Path string
	Body []byte
}

// stats is the engine's live counters; recording reuses its buffers so that
// it costs no allocation in steady state.
type stats struct {
	requests                 [len(routePaths)]atomic.Int64
	injected, stalls, deaths atomic.Int64
	outputTokens             atomic.Int64
	inputTokens              atomic.Int64
	cachedTokens, bestTokens atomic.Int64
	streams                  atomic.Int64

	mu      sync.Mutex
	ring    [recentBodies]recordedSlot
	next    int // ring index of the next write
	n       int // filled slots
	aborted []string
}

type recordedSlot struct {
	route int
	path  []byte // only for unknown routes
	body  []byte
}

func (s *stats) count(route int) { s.requests[route].Add(1) }

func (s *stats) record(route int, path, body []byte) {
	s.mu.Lock()
	slot := &s.ring[s.next]
	slot.route = route
	slot.path = slot.path[:0]
	if route == 0 {
		slot.path = append(slot.path, path...)
	}
	slot.body = append(slot.body[:0], body...)
	s.next = (s.next + 1) % recentBodies
	s.n = min(s.n+1, recentBodies)
	s.mu.Unlock()
}

func (s *stats) addAborted(rid string) {
	s.mu.Lock()
	s.aborted = append(s.aborted, rid)
	s.mu.Unlock()
}

// Stats returns a snapshot of the engine's counters and recorded bodies.
func (e *Engine) Stats() Stats {
	s := &e.stats
	batch := e.sched.snapshot()
	out := Stats{
		Requests:         make(map[string]int64),
		InFlight:         batch.Running,
		MaxInFlight:      batch.PeakRunning,
		Queued:           batch.Queued,
		Injected:         s.injected.Load(),
		Stalls:           s.stalls.Load(),
		Deaths:           s.deaths.Load(),
		OutputTokens:     s.outputTokens.Load(),
		InputTokens:      s.inputTokens.Load(),
		CachedTokens:     s.cachedTokens.Load(),
		BestCachedTokens: s.bestTokens.Load(),
		KVCacheTokens:    int64(e.cache.cachedTokens()),
		Batch:            batch,
		PrefillSlots:     e.prefillSlots.snapshot(),
		AwaitingKV:       e.awaiting.Load(),
		Streams:          s.streams.Load(),
	}
	for i := range s.requests {
		if n := s.requests[i].Load(); n > 0 {
			out.Requests[routePaths[i]] = n
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := 0; i < s.n; i++ {
		slot := &s.ring[(s.next-s.n+i+recentBodies)%recentBodies]
		path := routePaths[slot.route]
		if slot.route == 0 {
			path = string(slot.path)
		}
		out.Bodies = append(out.Bodies, RecordedBody{Path: path, Body: append([]byte(nil), slot.body...)})
	}
	if len(out.Bodies) > 0 {
		last := out.Bodies[len(out.Bodies)-1]
		out.LastPath, out.LastBody = last.Path, last.Body
	}
	out.Aborted = append([]string(nil), s.aborted...)
	out.Rooms, out.Registered, out.RegistrationFailed = e.kv.snapshot()
	return out
}

// ResetStats starts the counters afresh: requests, faults, tokens, recorded
// bodies, aborts and rooms are forgotten, peaks restart from now and the
// occupancy window starts now. The KV cache is kept (see FlushCache).
func (e *Engine) ResetStats() {
	s := &e.stats
	for i := range s.requests {
		s.requests[i].Store(0)
	}
	for _, c := range []*atomic.Int64{&s.injected, &s.stalls, &s.deaths, &s.outputTokens, &s.inputTokens, &s.cachedTokens, &s.bestTokens} {
		c.Store(0)
	}
	s.mu.Lock()
	s.next, s.n = 0, 0
	s.aborted = nil
	s.mu.Unlock()
	e.kv.resetRooms()
	e.sched.reset()
	e.prefillSlots.reset()
}

// FlushCache empties the KV prefix cache, as POST /flush_cache does.
func (e *Engine) FlushCache() { e.cache.flush() }
