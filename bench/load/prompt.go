package load

import "strconv"

// The words of a workload's prompts. The simulated engines count one token per
// whitespace-separated word, so two prompts share exactly the tokens of their common
// leading words: which words repeat decides what a prefix cache can serve.

// appendFiller appends n vocabulary words, each after a space, in an order drawn from h.
// Fillers only ever follow a word that is unique or shared on purpose, so that the
// vocabulary's repetitions never make two prompts share a prefix by chance.
func appendFiller(dst []byte, h uint64, n int) []byte {
	for i := range n {
		dst = append(dst, ' ')
		dst = append(dst, words[(h+uint64(i)*7)%uint64(len(words))]...)
	}
	return dst
}

// appendTag appends a word that appears nowhere else in a round against a target:
// letter, the round's salt in hex, then the numbers that tell the requests apart
// ("u1f2e3d4c.17", "u1f2e3d4c.3.2"). Tags are letters, digits and dots: no JSON escaping.
func appendTag(dst []byte, letter byte, salt uint64, nums ...uint64) []byte {
	dst = append(dst, letter)
	dst = strconv.AppendUint(dst, salt&0xffffffff, 16)
	for _, n := range nums {
		dst = append(dst, '.')
		dst = strconv.AppendUint(dst, n, 10)
	}
	return dst
}

// systemPrompt is the text of system prompt rank (1-based) for a run's seed: "sys<rank>"
// then n-1 filler words. The same in every round and against every target, as a
// deployment's system prompts are: after the first requests, they are warm.
func systemPrompt(seed uint64, rank, n int) []byte {
	b := append([]byte("sys"), strconv.Itoa(rank)...)
	return appendFiller(b, splitmix64(seed^uint64(rank)), n-1)
}
