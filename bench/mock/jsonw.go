package mock

import (
	"strconv"
	"unicode/utf8"
)

// The mock builds its answers by appending to reused byte slices: encoding/json
// with maps would make the mock, not the balancer, the bottleneck in load tests.

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string. Non-ASCII UTF-8 stays as is (like
// orjson, which SGLang uses); invalid bytes become U+FFFD.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, "\ufffd"...)
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

func appendInt(b []byte, v int64) []byte { return strconv.AppendInt(b, v, 10) }

func appendFloat(b []byte, v float64) []byte {
	return strconv.AppendFloat(b, v, 'f', -1, 64)
}

// appendLogprobs appends SGLang's `[[logprob, token_id, null], ...]` list.
func appendLogprobs(b []byte, logprob float64, ids []int32) []byte {
	b = append(b, '[')
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendLogprob(b, logprob, id)
	}
	return append(b, ']')
}

// appendLogprob appends one `[logprob, token_id, null]` triple.
func appendLogprob(b []byte, logprob float64, id int32) []byte {
	b = append(b, '[')
	b = appendFloat(b, logprob)
	b = append(b, ',')
	b = appendInt(b, int64(id))
	return append(b, ",null]"...)
}
