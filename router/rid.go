package router

import "strconv"

// Each leg carries an SGLang rid that pdlb knows, so that it can name the
// request in POST /abort_request when the request fails or its client
// leaves (proxy/abort.go). Both legs get the same one: each engine keeps
// its own table of rids, and SGLang's own balancers send both the same
// body too.

// roomDigits is the width of a room in pdlb's rids: 2^63-1 has 19 digits.
const roomDigits = 19

// ownRIDCap bounds the length of appendOwnRID's output.
func ownRIDCap(id string, items int) int {
	return items*(2*len(id)+roomDigits+4) + 2
}

// appendOwnRID appends the rid pdlb gives an attempt that came without one:
// "<request id>-<room>", the room zero-padded to 19 digits; a batch gets a
// list, one per item, each with its item's room. The room makes the rid
// unique per attempt and per item even when clients reuse a request ID
// (SGLang refuses a rid it is already serving), and the fixed width keeps
// pdlb's rids from being prefixes of one another: SGLang's scheduler
// aborts every request whose rid *starts with* the one named
// (scheduler.py, abort_request: req.rid.startswith(recv_req.rid)).
func appendOwnRID(dst []byte, id string, rooms []uint64, batch bool) []byte {
	if batch {
		dst = append(dst, '[')
	}
	for i, room := range rooms {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, '"')
		dst = appendEscaped(dst, id)
		dst = append(dst, '-')
		dst = appendPadded(dst, room)
		dst = append(dst, '"')
	}
	if batch {
		dst = append(dst, ']')
	}
	return dst
}

// appendPadded appends room in roomDigits digits, zeros in front.
func appendPadded(dst []byte, room uint64) []byte {
	var digits [20]byte
	d := strconv.AppendUint(digits[:0], room, 10)
	for range roomDigits - len(d) {
		dst = append(dst, '0')
	}
	return append(dst, d...)
}
