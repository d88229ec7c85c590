package mock

import "sync"

// A prefill engine's KV prefix cache, modelled the way paged engines keep
// one: prompts are cut into blocks of BlockSize tokens, and block i is known
// by a hash chained over blocks 0..i, so a block only matches after the same
// prefix (a radix tree's path, flattened into keys). Only full blocks are
// cached. Capacity is in tokens; the least recently used blocks go first.
//
// A prompt touches its blocks deepest first, so its first block ends up the
// most recently used: eviction then takes the ends of chains before their
// starts, as a radix cache evicts leaves, and never strands a chain's tail
// behind an evicted head of the same prompt.

// defaultBlockSize is Options.BlockSize's default.
const defaultBlockSize = 16

// blockHashes appends the chained hash of every full block of tokens to dst.
// The hash runs over all tokens from the start; its state at the end of
// block i is block i's key.
func blockHashes(dst []uint64, tokens []int32, blockSize int) []uint64 {
	h := uint64(0x9e3779b97f4a7c15)
	full := len(tokens) / blockSize * blockSize
	for i := 0; i < full; i++ {
		h = mix64(h ^ uint64(uint32(tokens[i])))
		if (i+1)%blockSize == 0 {
			dst = append(dst, h)
		}
	}
	return dst
}

// mix64 is splitmix64's finaliser: every input bit moves every output bit.
func mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// kvCache is an LRU of block hashes bounded in blocks. Its nodes live in one
// slice allocated at construction and reused on eviction, so a warm cache
// allocates nothing per request. A nil *kvCache caches nothing.
type kvCache struct {
	mu        sync.Mutex
	blockSize int
	index     map[uint64]int32 // block hash → node
	nodes     []lruNode        // len = capacity in blocks
	used      int32            // nodes handed out so far
	head      int32            // most recently used, -1 when empty
	tail      int32            // least recently used, -1 when empty
	scratch   []uint64         // block hashes of the prompt at hand
}

type lruNode struct {
	key        uint64
	prev, next int32 // towards head, towards tail; -1 at the ends
}

// newKVCache makes a cache of capacityTokens (whole blocks of blockSize), or
// nil when that is less than one block.
func newKVCache(capacityTokens, blockSize int) *kvCache {
	blocks := capacityTokens / blockSize
	if blocks < 1 {
		return nil
	}
	return &kvCache{
		blockSize: blockSize,
		index:     make(map[uint64]int32, blocks),
		nodes:     make([]lruNode, blocks),
		head:      -1,
		tail:      -1,
	}
}

// match is the number of leading tokens of tokens held in cached full blocks.
func (c *kvCache) match(tokens []int32) int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.scratch = blockHashes(c.scratch[:0], tokens, c.blockSize)
	return c.leading() * c.blockSize
}

// insert caches tokens' full blocks, marking them (matched ones included)
// most recently used and evicting the least recently used over capacity.
func (c *kvCache) insert(tokens []int32) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.scratch = blockHashes(c.scratch[:0], tokens, c.blockSize)
	c.touchAll()
}

// admit is match then insert in one pass: the cached prefix of tokens
// before this prompt, which is then cached itself.
func (c *kvCache) admit(tokens []int32) int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.scratch = blockHashes(c.scratch[:0], tokens, c.blockSize)
	n := c.leading()
	c.touchAll()
	return n * c.blockSize
}

// cachedTokens is how many tokens the cache holds.
func (c *kvCache) cachedTokens() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.index) * c.blockSize
}

// flush empties the cache.
func (c *kvCache) flush() {
	if c == nil {
		return
	}
	c.mu.Lock()
	clear(c.index)
	c.used, c.head, c.tail = 0, -1, -1
	c.mu.Unlock()
}

// leading counts the scratch blocks present from the first on.
func (c *kvCache) leading() int {
	for i, h := range c.scratch {
		if _, ok := c.index[h]; !ok {
			return i
		}
	}
	return len(c.scratch)
}

// touchAll makes every scratch block most recently used, deepest first.
func (c *kvCache) touchAll() {
	for i := len(c.scratch) - 1; i >= 0; i-- {
		h := c.scratch[i]
		if n, ok := c.index[h]; ok {
			c.unlink(n)
			c.pushFront(n)
			continue
		}
		var n int32
		if int(c.used) < len(c.nodes) {
			n = c.used
			c.used++
		} else {
			n = c.tail
			c.unlink(n)
			delete(c.index, c.nodes[n].key)
		}
		c.nodes[n].key = h
		c.index[h] = n
		c.pushFront(n)
	}
}

func (c *kvCache) unlink(n int32) {
	nd := &c.nodes[n]
	if nd.prev >= 0 {
		c.nodes[nd.prev].next = nd.next
	} else {
		c.head = nd.next
	}
	if nd.next >= 0 {
		c.nodes[nd.next].prev = nd.prev
	} else {
		c.tail = nd.prev
	}
	nd.prev, nd.next = -1, -1
}

func (c *kvCache) pushFront(n int32) {
	nd := &c.nodes[n]
	nd.prev, nd.next = -1, c.head
	if c.head >= 0 {
		c.nodes[c.head].prev = n
	}
	c.head = n
	if c.tail < 0 {
		c.tail = n
	}
}

// PrefixSet is an unbounded record of every block a cluster's prefills were
// asked for: the cache of an ideal router that sends every request to the
// engine holding its longest prefix, with capacity ignored. Share one among
// the prefill engines of a cluster (Options.Seen). It holds one hash per
// distinct block seen (some tens of bytes each) until Reset.
type PrefixSet struct {
	mu        sync.Mutex
	blockSize int
	seen      map[uint64]struct{}
	scratch   []uint64
}

// NewPrefixSet makes an empty set over blocks of blockSize tokens (default 16).
func NewPrefixSet(blockSize int) *PrefixSet {
	if blockSize <= 0 {
		blockSize = defaultBlockSize
	}
	return &PrefixSet{blockSize: blockSize, seen: make(map[uint64]struct{})}
}

// Observe returns the number of leading tokens of tokens, in full blocks,
// that an earlier prompt had, and then records tokens' blocks.
func (s *PrefixSet) Observe(tokens []int32) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scratch = blockHashes(s.scratch[:0], tokens, s.blockSize)
	n := len(s.scratch)
	for i, h := range s.scratch {
		if _, ok := s.seen[h]; !ok {
			n = i
			break
		}
	}
	for _, h := range s.scratch[n:] {
		s.seen[h] = struct{}{}
	}
	return n * s.blockSize
}

// Reset forgets everything observed.
func (s *PrefixSet) Reset() {
	s.mu.Lock()
	s.seen = make(map[uint64]struct{})
	s.mu.Unlock()
}
