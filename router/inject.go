package router

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"unsafe"
)

// maxRoom is the largest bootstrap_room SGLang accepts (2^63-1).
const maxRoom = 1<<63 - 1

// b2s views b as a string without copying; the string must not outlive b.
func b2s(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// newRoom draws a room uniformly in [0, 2^63-1]. With dpSize > 1 and a
// prefill rank, the room satisfies room % dpSize == rank, so engines that
// follow the room (follow_bootstrap_room) agree with the rank.
func newRoom(dpSize int, rank int64) uint64 {
	r := rand.Uint64() >> 1
	if dpSize > 1 {
		d := uint64(dpSize)
		r = r - r%d + uint64(rank)
		if r > maxRoom {
			r -= d
		}
	}
	return r
}

// injection is what pdlb stamps on one leg's body.
type injection struct {
	host string
	// port is nil for JSON null.
	port  *int
	rooms []uint64 // one room, or one per batch item
	batch bool
	// ranks are the DP-rank members written for this leg (the client's
	// own rank members are then cut out).
	ranks  [2]rankMember
	nranks int
	// rid is the rid pdlb writes (appendOwnRID; the client's rid members,
	// null ones, are then cut out); nil when the client's is kept or
	// aborts are off.
	rid []byte
}

// rankMember is one DP-rank member: "routed_dp_rank" or "disagg_prefill_dp_rank".
type rankMember struct {
	key  string
	rank int64
}

// appendInjected appends body to dst with the client's bootstrap members
// (and, when rewriting ranks, its rank members) cut out and pdlb's appended
// before the closing brace. Everything else is copied byte for byte.
func appendInjected(dst, body []byte, r *pdRequest, in *injection) []byte {
	var all [3 * maxDrops]span
	drops := append(all[:0], r.drops[:r.ndrops]...)
	sorted := true
	if in.nranks > 0 && r.nrankSpans > 0 {
		drops = append(drops, r.rankSpans[:r.nrankSpans]...)
		sorted = false
	}
	if in.rid != nil && r.nridSpans > 0 {
		drops = append(drops, r.ridSpans[:r.nridSpans]...)
		sorted = false
	}
	if !sorted {
		slices.SortFunc(drops, func(a, b span) int { return a.start - b.start })
	}
	pos := 0
	for _, d := range drops {
		dst = append(dst, body[pos:d.start]...)
		pos = d.end
		// Take the separating comma with the member; for the last member,
		// take the comma before it instead.
		i := skipSpace(body, pos)
		if body[i] == ',' {
			pos = i + 1
		} else {
			dst = trimTrailingComma(dst)
		}
	}
	dst = append(dst, body[pos:r.closeIdx]...)
	if r.members > len(drops) {
		dst = trimTrailingSpace(dst)
		dst = append(dst, ',')
	}
	dst = appendMembers(dst, in)
	return append(dst, body[r.closeIdx:]...)
}

// injectedCap bounds the length of appendInjected's output for body and
// any leg of in, so that the buffer holding the injected bodies is
// allocated once, at the size it needs, instead of growing (and copying)
// while a large body is appended to it.
func injectedCap(body []byte, in *injection) int {
	// Per item: the host (escaped: at most doubled) with its quotes, a port
	// or null, a room, and their commas. Once: the member names, brackets
	// and two rank members, 128 bytes at most.
	perItem := 2*len(in.host) + 3 + 21 + 21
	return len(body) + 160 + len(in.rooms)*perItem
}

func appendMembers(dst []byte, in *injection) []byte {
	dst = append(dst, `"bootstrap_host":`...)
	dst = appendRepeated(dst, in, func(d []byte) []byte { return appendJSONString(d, in.host) })
	dst = append(dst, `,"bootstrap_port":`...)
	dst = appendRepeated(dst, in, func(d []byte) []byte {
		if in.port == nil {
			return append(d, "null"...)
		}
		return strconv.AppendInt(d, int64(*in.port), 10)
	})
	dst = append(dst, `,"bootstrap_room":`...)
	if in.batch {
		dst = append(dst, '[')
		for i, room := range in.rooms {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = strconv.AppendUint(dst, room, 10)
		}
		dst = append(dst, ']')
	} else {
		dst = strconv.AppendUint(dst, in.rooms[0], 10)
	}
	for _, m := range in.ranks[:in.nranks] {
		dst = append(dst, ',', '"')
		dst = append(dst, m.key...)
		dst = append(dst, '"', ':')
		dst = strconv.AppendInt(dst, m.rank, 10)
	}
	if in.rid != nil {
		dst = append(dst, `,"rid":`...)
		dst = append(dst, in.rid...)
	}
	return dst
}

// appendRepeated writes one value, or a list of len(rooms) copies for a batch.
func appendRepeated(dst []byte, in *injection, value func([]byte) []byte) []byte {
	if !in.batch {
		return value(dst)
	}
	dst = append(dst, '[')
	for i := range in.rooms {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = value(dst)
	}
	return append(dst, ']')
}

func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	dst = appendEscaped(dst, s)
	return append(dst, '"')
}

// appendEscaped appends s as the inside of a JSON string; s is visible
// ASCII (hosts, request IDs), so only quotes and backslashes are escaped.
func appendEscaped(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '"' || c == '\\' {
			dst = append(dst, '\\')
		}
		dst = append(dst, c)
	}
	return dst
}

func skipSpace[B ~string | ~[]byte](b B, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

func trimTrailingSpace(b []byte) []byte {
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

func trimTrailingComma(b []byte) []byte {
	b = trimTrailingSpace(b)
	if len(b) > 0 && b[len(b)-1] == ',' {
		b = b[:len(b)-1]
	}
	return b
}
