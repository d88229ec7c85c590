package mock

// The prefill step of a prefill engine: a prefill slot, the KV prefix cache,
// the compute time of the uncached tokens, and the upper-bound bookkeeping.

// observe records r's prompts in the cluster's PrefixSet as it arrives, and
// notes for each item the prefix any earlier request had: what an ideal
// router with unbounded caches would have found cached.
func (e *Engine) observe(r *Request) {
	if e.opts.Seen == nil {
		return
	}
	r.best = make([]int, r.Items)
	for i := range r.best {
		r.best[i] = e.opts.Seen.Observe(r.prompt(i))
	}
}

// prefill computes r's items: it waits for a prefill slot (FIFO) when the
// model gives prefills a time, then takes each item's cached prefix from the
// KV cache and caches the item's prompt, and works PrefillOverhead +
// PrefillPerToken × the uncached tokens. Items are matched one after the
// other, so n copies of one prompt compute it once. False: stopped or
// aborted first.
//
// A prompt is cached when its prefill starts: with several slots, a
// request sharing a prefix with one being computed finds it cached a little
// early, which one slot (the default) never shows.
func (e *Engine) prefill(a *admitted) bool {
	r := a.r
	timed := e.computesPrefill()
	tokens := int64(r.itemTokens())
	if timed {
		if !e.prefillSlots.acquire(e.stopping(), a.abort, tokens) {
			return false
		}
		defer e.prefillSlots.release(tokens)
	}
	uncached, cached, best := 0, 0, 0
	for i := 0; i < r.Items; i++ {
		p := r.prompt(i)
		c := e.cache.admit(p)
		r.setCached(i, c)
		cached += c
		uncached += len(p) - c
		if i < len(r.best) {
			best += r.best[i]
		}
	}
	e.stats.inputTokens.Add(int64(uncached + cached))
	e.stats.cachedTokens.Add(int64(cached))
	e.stats.bestTokens.Add(int64(best))
	if !timed {
		return wait(a.timer, 0, e.stopping(), a.abort)
	}
	return wait(a.timer, e.prefillDuration(uncached), e.stopping(), a.abort)
}
