package load

import "strconv"

// words is the vocabulary prompts are drawn from: plain ASCII, so bodies need no JSON escaping.
var words = [...]string{
	"the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while",
	"seven", "engines", "share", "one", "cache", "and", "every", "token", "counts", "twice",
}

// appendBody writes the JSON body of request number idx. The index leads the prompt so
// that engines with prefix caching cannot serve every prompt from one cached prefix.
func appendBody(dst []byte, route string, idx uint64, inLen, outLen int, stream bool) []byte {
	switch route {
	case RouteChatCompletions:
		dst = append(dst, `{"model":"default","messages":[{"role":"user","content":"`...)
		dst = appendPrompt(dst, idx, inLen)
		dst = append(dst, `"}],"max_tokens":`...)
	case RouteCompletions:
		dst = append(dst, `{"model":"default","prompt":"`...)
		dst = appendPrompt(dst, idx, inLen)
		dst = append(dst, `","max_tokens":`...)
	default:
		dst = append(dst, generateOpen...)
		dst = appendPrompt(dst, idx, inLen)
		return appendGenerateClose(dst, outLen, stream)
	}
	dst = strconv.AppendInt(dst, int64(outLen), 10)
	dst = append(dst, `,"ignore_eos":true,"stream":`...)
	dst = strconv.AppendBool(dst, stream)
	return append(dst, '}')
}

// generateOpen starts a /generate body; the prompt text follows, then appendGenerateClose.
const generateOpen = `{"text":"`

// appendGenerateClose ends the prompt text of a /generate body and writes the rest.
func appendGenerateClose(dst []byte, outLen int, stream bool) []byte {
	dst = append(dst, `","sampling_params":{"max_new_tokens":`...)
	dst = strconv.AppendInt(dst, int64(outLen), 10)
	// ignore_eos makes a real engine produce exactly max_new_tokens, so runs compare equal work.
	dst = append(dst, `,"ignore_eos":true},"stream":`...)
	dst = strconv.AppendBool(dst, stream)
	return append(dst, '}')
}

// appendPrompt writes about n words: "r<idx>" then n-1 vocabulary words.
func appendPrompt(dst []byte, idx uint64, n int) []byte {
	if n <= 0 {
		return dst
	}
	dst = append(dst, 'r')
	dst = strconv.AppendUint(dst, idx, 10)
	h := splitmix64(idx)
	for i := 1; i < n; i++ {
		dst = append(dst, ' ')
		dst = append(dst, words[(h+uint64(i)*7)%uint64(len(words))]...)
	}
	return dst
}

// appendRoom adds "bootstrap_room" before the closing brace: a PD engine
// addressed directly (without a balancer) refuses a request without one.
// A balancer replaces it, so the same bodies can go to both in one run.
func appendRoom(body []byte, idx uint64) []byte {
	body = body[:len(body)-1]
	body = append(body, `,"bootstrap_room":`...)
	body = strconv.AppendUint(body, idx, 10)
	return append(body, '}')
}
