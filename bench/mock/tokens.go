package mock

import "strconv"

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

// chainedVocab is the number of distinct output ids ChainedOutput draws
// from: FirstOutputID to FirstOutputID+chainedVocab-1, clear of the prompt
// words' ids (wordID, from 2000).
const chainedVocab = 1000

// chainedIDs appends n output ids, each a hash of the whole sequence before
// it: the prompt's ids, then the outputs so far. Ids enter the hash as the
// tokenizer would read their text back (chainedCanon), so a prompt that is
// the text of earlier output continues the same way as one of its ids.
func chainedIDs(dst, prompt []int32, n int) []int32 {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	mix := func(id int32) {
		v := uint32(chainedCanon(id))
		for i := 0; i < 4; i++ {
			h = (h ^ uint64(byte(v>>(8*i)))) * prime
		}
	}
	for _, id := range prompt {
		mix(id)
	}
	for k := 0; k < n; k++ {
		id := FirstOutputID + int32(h%chainedVocab)
		dst = append(dst, id)
		mix(id)
	}
	return dst
}

// chainedCanon is the id a chained output id reads back as when its text is
// tokenized (the word's id); other ids are themselves.
func chainedCanon(id int32) int32 {
	if id < FirstOutputID || id >= FirstOutputID+chainedVocab {
		return id
	}
	return tokenize(nil, chainedWord(id))[0]
}

// chainedWord is the text of a chained output id: a vocabulary word and a
// number, unique per id ("fox3").
func chainedWord(id int32) string {
	i := int(id - FirstOutputID)
	return vocab[i%len(vocab)] + strconv.Itoa(i/len(vocab))
}

// appendChainedText appends the text of ids, each word after a space (as a
// BPE tokenizer decodes "Ġword"), so prompt text + generated text is again
// the sequence's text.
func appendChainedText(b []byte, ids []int32) []byte {
	for _, id := range ids {
		b = append(b, ' ')
		b = append(b, chainedWord(id)...)
	}
	return b
}
