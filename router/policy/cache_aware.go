package policy

import (
	"bytes"
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"pdlb/config"
	"pdlb/proxy"
)

// CacheAware sends a request to the backend most likely to hold its
// prompt's prefix in its KV cache, learnt from where earlier prompts went
// (prefixTree), unless that backend is overloaded; new prefixes go to the
// least loaded backend, so they spread.
//
// Unlike SGLang's cache_aware, which sends every request to the shortest
// queue once any two backends are imbalanced (under PD the gate is almost
// always open: sglang PR #32195), only the overloaded backends leave the
// choice: requests whose prefix sits on a backend that is not overloaded
// still follow it.
type CacheAware struct {
	matchThreshold float64
	absThreshold   float64
	relThreshold   float64
	// reasonKey names the chosen backend's match in the log line.
	reasonKey string

	// mu guards tree: Pick reads it, Chosen writes it. Hashing happens
	// outside the lock, so each holds it only to walk the tree.
	mu   sync.RWMutex
	tree *prefixTree
	// stale is a pool (Pick's cands) in which a tenant of the tree was
	// missing: the next Chosen forgets the backends not in it.
	stale atomic.Pointer[[]*proxy.Backend]
	// scratch holds *cacheAwareScratch, so a request allocates nothing. It
	// also hands Pick's hashes to Chosen: see hashesOf.
	scratch sync.Pool
}

var (
	_ Policy   = (*CacheAware)(nil)
	_ Observer = (*CacheAware)(nil)
)

// cacheAwareScratch is one call's working memory.
type cacheAwareScratch struct {
	// hashes are the block hashes of prompt, a copy of the last prompt
	// hashed (empty when not kept).
	hashes  []uint64
	prompt  []byte
	matched []int32
	cands   []candidate
	path    []*node
}

// maxKeptPrompt bounds the prompt a scratch keeps a copy of (hashesOf).
const maxKeptPrompt = 256 << 10

// hashesOf sets s.hashes to the block hashes of prompt. Chosen follows the
// Pick of the same request at once, on the same goroutine, so it usually
// gets back the scratch that Pick used (sync.Pool's per-P slot) with that
// prompt's hashes: if the kept copy equals the prompt (comparing 16 KB
// costs a tenth of hashing it), they are reused. Equal bytes make equal
// hashes, so a scratch from another request only costs the comparison.
func (p *CacheAware) hashesOf(s *cacheAwareScratch, prompt []byte) {
	if len(s.prompt) > 0 && bytes.Equal(s.prompt, prompt) {
		return
	}
	s.hashes = p.tree.blocks(prompt, s.hashes[:0])
	s.prompt = s.prompt[:0]
	if len(prompt) <= maxKeptPrompt {
		s.prompt = append(s.prompt, prompt...)
	}
}

// candidate is an acceptable backend as Pick sees it.
type candidate struct {
	b          *proxy.Backend
	load       int64
	matched    int // blocks of the prompt it holds
	held       int // blocks it holds in all
	overloaded bool
}

func newCacheAware(role proxy.Role, c config.CacheAware) (*CacheAware, error) {
	if c.BlockBytes < 1 || c.MaxTreeBytes < 1 || math.IsNaN(c.MatchThreshold) || math.IsNaN(c.BalanceRelThreshold) {
		return nil, fmt.Errorf("cache_aware: invalid parameters %+v", c)
	}
	p := &CacheAware{
		matchThreshold: c.MatchThreshold,
		absThreshold:   float64(c.BalanceAbsThreshold),
		relThreshold:   c.BalanceRelThreshold,
		reasonKey:      role.String() + "_prefix_match",
		tree:           newPrefixTree(c.BlockBytes, int64(c.MaxTreeBytes)),
	}
	p.scratch.New = func() any { return new(cacheAwareScratch) }
	return p, nil
}

// Pick implements Policy. Among the acceptable backends, those overloaded
// (in flight > mean + balance_abs_threshold and > balance_rel_threshold ×
// the least loaded's) are left out. If the best match among the rest
// covers at least match_threshold of the prompt, the best-matching backend
// wins (ties: fewer in flight, then random); else the least loaded (ties:
// the one holding least in the tree, then random). The reason is the share
// of the prompt the chosen backend holds.
//
// cands is the role's whole pool (router.pickOne), so a backend of the
// tree missing from it was removed: it is forgotten at the next Chosen.
func (p *CacheAware) Pick(req Request, cands []*proxy.Backend, ok func(*proxy.Backend) bool) (*proxy.Backend, Reason) {
	s := p.scratch.Get().(*cacheAwareScratch)
	defer p.scratch.Put(s)
	cs := s.cands[:0]
	var total, least int64 = 0, math.MaxInt64
	for _, b := range cands {
		if ok(b) {
			load := b.InFlight()
			cs = append(cs, candidate{b: b, load: load})
			total += load
			least = min(least, load)
		}
	}
	s.cands = cs
	if len(cs) == 0 {
		return nil, Reason{}
	}
	p.hashesOf(s, req.Prompt)

	p.mu.RLock()
	s.matched = p.tree.match(s.hashes, s.matched)
	known, j := 0, 0 // cs is in the order of cands
	for _, b := range cands {
		ten := p.tree.tenantOf(b)
		if ten != nil {
			known++
		}
		if j < len(cs) && cs[j].b == b {
			if ten != nil {
				cs[j].matched, cs[j].held = int(s.matched[ten.slot]), ten.blocks
			}
			j++
		}
	}
	stale := known < len(p.tree.tenants)
	p.mu.RUnlock()
	if stale {
		p.markStale(cands)
	}

	mean := float64(total) / float64(len(cs))
	for i := range cs {
		load := float64(cs[i].load)
		cs[i].overloaded = load > mean+p.absThreshold && load > p.relThreshold*float64(least)
	}
	best := choose(cs, betterMatch)
	if best.matched == 0 || p.ratio(best, req) < p.matchThreshold {
		best = choose(cs, lessLoaded)
	}
	return best.b, Reason{p.reasonKey, p.ratio(best, req)}
}

// markStale keeps the pool for Chosen (its own function, so only a Pick
// that finds a stale tenant allocates the pointer).
//
//go:noinline
func (p *CacheAware) markStale(pool []*proxy.Backend) { p.stale.Store(&pool) }

// choose returns the candidate that is not overloaded and comes first by
// cmp (negative: a before b), drawing at random among equals. The least
// loaded candidate is never overloaded (it is at most the mean), so there
// is always one.
func choose(cs []candidate, cmp func(a, b *candidate) int) *candidate {
	var best *candidate
	ties := 0
	for i := range cs {
		c := &cs[i]
		if c.overloaded {
			continue
		}
		d := -1
		if best != nil {
			d = cmp(c, best)
		}
		switch {
		case d < 0:
			best, ties = c, 1
		case d == 0:
			if ties++; rand.IntN(ties) == 0 {
				best = c
			}
		}
	}
	return best
}

// betterMatch orders by blocks matched, most first, then by fewer in flight.
func betterMatch(a, b *candidate) int {
	if a.matched != b.matched {
		return b.matched - a.matched
	}
	return cmp.Compare(a.load, b.load)
}

// lessLoaded orders by fewer in flight, then by fewer blocks in the tree.
func lessLoaded(a, b *candidate) int {
	if a.load != b.load {
		return cmp.Compare(a.load, b.load)
	}
	return a.held - b.held
}

// ratio is the share of the prompt c holds.
func (p *CacheAware) ratio(c *candidate, req Request) float64 {
	if len(req.Prompt) == 0 {
		return 0
	}
	return float64(c.matched*p.tree.blockBytes) / float64(len(req.Prompt))
}

// Chosen implements Observer: the request now warms b's cache, so the
// prompt goes into the tree under b, as b's most recently used.
func (p *CacheAware) Chosen(req Request, b *proxy.Backend) {
	s := p.scratch.Get().(*cacheAwareScratch)
	defer p.scratch.Put(s)
	p.hashesOf(s, req.Prompt)
	stale := p.stale.Swap(nil)
	if len(s.hashes) == 0 && stale == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if stale != nil {
		p.tree.forgetAbsent(*stale, b)
	}
	s.path = p.tree.insert(b, s.hashes, s.path)
}
