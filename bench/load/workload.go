package load

// roundPlan is what a round's loop needs besides its target.
type roundPlan struct {
	opts    *Options
	prompts *prompts
	seed    uint64 // draws: lengths, arrivals, system prompt picks; the same for every target
	salt    uint64 // unique words: differs per round and per target
}

// prompts is what the requests of a run have in common: its system prompts and their
// popularity. Built once per run, then only read, by every worker at once.
type prompts struct {
	workload  string
	system    [][]byte // system[k]: the system prompt of rank k+1
	systemLen int
	zipf      zipf
}

func newPrompts(o *Options) *prompts {
	p := &prompts{workload: o.Workload, systemLen: o.SystemLen}
	if o.Workload == WorkloadShared || o.Workload == WorkloadMultiturn {
		p.zipf = newZipf(o.SystemPrompts, o.ZipfS)
		for rank := 1; rank <= o.SystemPrompts; rank++ {
			p.system = append(p.system, systemPrompt(uint64(o.Seed), rank, o.SystemLen))
		}
	}
	return p
}

// appendIndexed writes the /generate body of request idx of the shared or unique
// workload and returns its prompt length in words. draw is the request's random value
// (its lengths come from it too), salt the round's, inLen the user message's length.
// Request idx of shared and of unique, under one seed, have the same length.
func (p *prompts) appendIndexed(dst []byte, draw, salt, idx uint64, inLen, outLen int, stream bool) ([]byte, int) {
	dst = append(dst, generateOpen...)
	h := splitmix64(draw)
	words := p.systemLen + inLen
	rest := words // the words from the unique one on
	if p.workload == WorkloadShared {
		dst = append(dst, p.system[p.zipf.rank(h)-1]...)
		dst = append(dst, ' ')
		rest = inLen
	}
	dst = appendTag(dst, 'u', salt, idx)
	dst = appendFiller(dst, h>>32, rest-1)
	return appendGenerateClose(dst, outLen, stream), words
}
