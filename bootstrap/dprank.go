package bootstrap

import (
	"encoding/json"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// dpRankTable is the 2026-02-23 side channel (§3.4): a prefill rank tells
// which DP rank took a bootstrap room, a decode asks for a batch of rooms.
//
// Entries live exactly ttl. SGLang sweeps every interval, so its entries
// live between one and two intervals; here expiry is checked on read and
// the map is swept lazily (at most once per ttl, on write), so no
// goroutine needs stopping and tests drive expiry with the injected clock.
type dpRankTable struct {
	ttl time.Duration
	now func() time.Time

	mu        sync.Mutex
	entries   map[int64]dpEntry
	lastSweep time.Time
}

type dpEntry struct {
	rank int64
	at   time.Time
}

func newDPRankTable(ttl time.Duration, now func() time.Time) *dpRankTable {
	return &dpRankTable{ttl: ttl, now: now, entries: map[int64]dpEntry{}, lastSweep: now()}
}

func (t *dpRankTable) put(room, rank int64) {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if now.Sub(t.lastSweep) >= t.ttl {
		for k, e := range t.entries {
			if now.Sub(e.at) >= t.ttl {
				delete(t.entries, k)
			}
		}
		t.lastSweep = now
	}
	t.entries[room] = dpEntry{rank: rank, at: now}
}

// appendQuery renders {"<room>": dp_rank, ...} for the live rooms among
// rooms, in request order, each room once; unknown rooms are omitted as in
// SGLang.
func (t *dpRankTable) appendQuery(dst []byte, rooms []int64) []byte {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	dst = append(dst, '{')
	seen := make(map[int64]struct{}, len(rooms))
	for _, r := range rooms {
		e, ok := t.entries[r]
		if _, dup := seen[r]; dup || !ok || now.Sub(e.at) >= t.ttl {
			continue
		}
		seen[r] = struct{}{}
		if len(dst) > 1 {
			dst = append(dst, ',')
		}
		dst = append(dst, '"')
		dst = strconv.AppendInt(dst, r, 10)
		dst = append(dst, '"', ':')
		dst = strconv.AppendInt(dst, e.rank, 10)
	}
	return append(dst, '}')
}

func (t *dpRankTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.entries)
}

func (t *dpRankTable) clear() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.entries = map[int64]dpEntry{}
}

// handleRegisterDPRank serves POST /register_dp_rank
// {"bootstrap_room": int, "dp_rank": int} → 200 "OK". Values are
// int()-coerced like SGLang; anything else is a 400 naming the field.
func (r *Registry) handleRegisterDPRank(ns *Namespace, ctx *fasthttp.RequestCtx) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(ctx.PostBody(), &m); err != nil || m == nil {
		badRequest(ctx, badField("body", "must be a JSON object"))
		return
	}
	f := fields(m)
	room := f.int64Field("bootstrap_room")
	rank := f.int64Field("dp_rank")
	if f.err == nil && rank < 0 {
		f.err = badField("dp_rank", "must be >= 0, got %d", rank)
	}
	if f.err != nil {
		badRequest(ctx, f.err)
		return
	}
	ns.dp.put(room, rank)
	textOK(ctx)
}

// handleQueryDPRanks serves POST /query_dp_ranks {"bootstrap_rooms": [...]}
// → 200 {"<room>": dp_rank}. It is a read, so it stays open when writes
// need a token: stock decodes send it without credentials.
func (r *Registry) handleQueryDPRanks(ns *Namespace, ctx *fasthttp.RequestCtx) {
	var body struct {
		Rooms *[]json.RawMessage `json:"bootstrap_rooms"`
	}
	if err := json.Unmarshal(ctx.PostBody(), &body); err != nil {
		badRequest(ctx, badField("bootstrap_rooms", "must be a list of integers in a JSON object"))
		return
	}
	if body.Rooms == nil {
		badRequest(ctx, badField("bootstrap_rooms", "is required"))
		return
	}
	rooms := make([]int64, 0, len(*body.Rooms))
	for i, raw := range *body.Rooms {
		v, problem := rawInt(raw)
		if problem != "" {
			badRequest(ctx, badField("bootstrap_rooms["+strconv.Itoa(i)+"]", "%s", problem))
			return
		}
		rooms = append(rooms, v)
	}
	jsonReply(ctx, fasthttp.StatusOK, ns.dp.appendQuery(nil, rooms))
}

func (f *fieldReader) int64Field(k string) int64 {
	if f.err != nil {
		return 0
	}
	raw, ok := f.m[k]
	if !ok {
		f.err = badField(k, "is required")
		return 0
	}
	v, problem := rawInt(raw)
	if problem != "" {
		f.err = badField(k, "%s", problem)
	}
	return v
}
