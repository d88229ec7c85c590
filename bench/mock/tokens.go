package mock

// A deterministic stand-in for a tokenizer and a model: prompt words hash to
// token ids, and every answer is the same word sequence, so tests can predict
// exactly what an engine says.

// vocab is the mock model's output, token i being vocab[i%len(vocab)].
var vocab = [...]string{
	"the", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog",
	"while", "a", "mock", "engine", "streams", "tokens", "back",
}

// FirstOutputID is the token id of the first output token; token i is FirstOutputID+i.
const FirstOutputID = 1000

// Logprob values the mock reports, distinct per source so a test can tell
// whose entries a merged list holds and in which order.
const (
	// PrefillInputLogprob is the logprob of each prompt token in a prefill's input_token_logprobs.
	PrefillInputLogprob = -0.5
	// DecodeInputLogprob is the logprob of the single entry in a decode's input_token_logprobs.
	DecodeInputLogprob = -1.5
	// OutputLogprob is the logprob of every output token.
	OutputLogprob = -0.25
)

// outputID is the token id of output token i.
func outputID(i int) int32 { return FirstOutputID + int32(i) }

// outputPiece is the text of output token i as streamed (a space before all but the first).
func outputPiece(i int) string {
	if i == 0 {
		return vocab[0]
	}
	return " " + vocab[i%len(vocab)]
}

// appendOutputText appends the text of the first n output tokens.
func appendOutputText(b []byte, n int) []byte {
	for i := 0; i < n; i++ {
		if i > 0 {
			b = append(b, ' ')
		}
		b = append(b, vocab[i%len(vocab)]...)
	}
	return b
}

// tokenize appends one id per word of s, words being split on ASCII
// whitespace: FNV-1a of the word's bytes, kept within a 32k vocabulary and
// clear of the output ids. It is the mock's whole tokenizer (the KV cache,
// the upper bound and prompt_tokens all count these ids), so a load
// generator that shares a word prefix between prompts shares a token prefix.
func tokenize(dst []int32, s string) []int32 {
	const offset, prime = 2166136261, 16777619
	h, inWord := uint32(offset), false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if asciiSpace[c] {
			if inWord {
				dst = append(dst, wordID(h))
				h, inWord = offset, false
			}
			continue
		}
		h = (h ^ uint32(c)) * prime
		inWord = true
	}
	if inWord {
		dst = append(dst, wordID(h))
	}
	return dst
}

func wordID(h uint32) int32 { return int32(2000 + h%30000) }

// asciiSpace marks the bytes that separate words: space, \t, \n, \v, \f, \r.
var asciiSpace = [256]bool{' ': true, '\t': true, '\n': true, '\v': true, '\f': true, '\r': true}
