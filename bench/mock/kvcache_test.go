package mock

import "testing"

// seq returns n tokens from..from+n-1.
func seq(from, n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(from + i)
	}
	return out
}

func cat(parts ...[]int32) []int32 {
	var out []int32
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func TestKVCacheMatchesAfterInsert(t *testing.T) {
	c := newKVCache(1024, 4)
	p := seq(1, 12)
	if got := c.match(p); got != 0 {
		t.Fatalf("empty cache matched %d", got)
	}
	c.insert(p)
	if got := c.match(p); got != 12 {
		t.Errorf("same prompt matched %d, want 12", got)
	}
	if got := c.match(cat(seq(1, 8), seq(100, 8))); got != 8 {
		t.Errorf("prompt sharing two blocks matched %d, want 8", got)
	}
	if got := c.match(seq(1, 6)); got != 4 {
		t.Errorf("shorter prompt matched %d, want its one full block", got)
	}
}

func TestKVCacheDoesNotCachePartialBlocks(t *testing.T) {
	c := newKVCache(1024, 4)
	c.insert(seq(1, 7)) // one full block and three tokens
	if got := c.match(seq(1, 8)); got != 4 {
		t.Errorf("matched %d, want only the full block (4)", got)
	}
	if got := c.cachedTokens(); got != 4 {
		t.Errorf("cache holds %d tokens, want 4", got)
	}
}

func TestKVCacheBlocksMatchOnlyAfterTheirPrefix(t *testing.T) {
	c := newKVCache(1024, 4)
	c.insert(cat(seq(1, 4), seq(50, 4)))
	// Block [50..53] is cached, but after [1..4]: after [9..12] it is another block.
	if got := c.match(cat(seq(9, 4), seq(50, 4))); got != 0 {
		t.Errorf("same second block after a different first block matched %d", got)
	}
	if got := c.match(seq(50, 4)); got != 0 {
		t.Errorf("a cached non-first block matched at the start: %d", got)
	}
}

func TestKVCacheEvictsLeastRecentlyUsed(t *testing.T) {
	c := newKVCache(12, 4) // three blocks
	a, b := seq(1, 4), seq(100, 4)
	c.insert(a)
	c.insert(b)
	c.insert(a) // a is now more recent than b
	c.insert(seq(200, 4))
	c.insert(seq(300, 4)) // over capacity: b goes, not a
	if c.match(b) != 0 {
		t.Error("b survived though it was the least recently used")
	}
	if c.match(a) != 4 {
		t.Error("a was evicted though it was touched after b")
	}
}

func TestKVCacheEvictsChainEndsFirst(t *testing.T) {
	c := newKVCache(16, 4) // four blocks
	long := seq(1, 16)
	c.insert(long)        // blocks 0..3
	c.insert(seq(500, 4)) // one more block: evicts one of long's
	if got := c.match(long); got != 12 {
		t.Errorf("long prompt matched %d after one eviction, want 12 (its last block gone, not its first)", got)
	}
}

func TestKVCacheKeepsWithinCapacity(t *testing.T) {
	c := newKVCache(40, 4) // ten blocks
	for i := 0; i < 100; i++ {
		c.insert(seq(i*1000, 4*(1+i%5)))
		if got := c.cachedTokens(); got > 40 {
			t.Fatalf("after %d inserts the cache holds %d tokens, capacity 40", i+1, got)
		}
	}
	// A prompt longer than the cache keeps its prefix.
	huge := seq(99999, 80)
	c.insert(huge)
	if got := c.match(huge); got != 40 {
		t.Errorf("a prompt of 20 blocks in a 10-block cache matched %d, want its first 40 tokens", got)
	}
}

func TestKVCacheAdmitIsMatchThenInsert(t *testing.T) {
	c := newKVCache(1024, 4)
	p := seq(1, 10)
	if got := c.admit(p); got != 0 {
		t.Errorf("first admit %d", got)
	}
	if got := c.admit(p); got != 8 {
		t.Errorf("second admit %d, want 8", got)
	}
	c.flush()
	if got, n := c.match(p), c.cachedTokens(); got != 0 || n != 0 {
		t.Errorf("after flush matched %d, holds %d", got, n)
	}
	if newKVCache(3, 4) != nil {
		t.Error("a capacity below one block must mean no cache")
	}
	var none *kvCache
	if none.admit(p) != 0 || none.match(p) != 0 || none.cachedTokens() != 0 {
		t.Error("the nil cache cached something")
	}
}

func TestKVCacheWarmAdmitAllocatesNothing(t *testing.T) {
	c := newKVCache(64*16, 16)
	prompts := make([][]int32, 50)
	for i := range prompts {
		prompts[i] = seq(i*3000, 1000)
	}
	for _, p := range prompts { // warm: every node in use, scratch grown
		c.admit(p)
	}
	i := 0
	allocs := testing.AllocsPerRun(200, func() {
		c.admit(prompts[i%len(prompts)])
		i++
	})
	if allocs > 0 {
		t.Errorf("admit on a warm, evicting cache: %.1f allocations", allocs)
	}
}

func TestPrefixSetObserve(t *testing.T) {
	s := NewPrefixSet(4)
	sys := seq(1, 8)
	steps := []struct {
		prompt []int32
		want   int
	}{
		{cat(sys, seq(100, 4)), 0},             // nothing seen yet
		{cat(sys, seq(200, 6)), 8},             // shares the two system blocks
		{cat(sys, seq(100, 4), seq(7, 4)), 12}, // extends the first prompt
		{seq(100, 4), 0},                       // a seen block, but not at the start
		{cat(sys, seq(200, 6)), 12},            // its own earlier full blocks, not the partial one
	}
	for i, st := range steps {
		if got := s.Observe(st.prompt); got != st.want {
			t.Errorf("step %d: Observe %d, want %d", i, got, st.want)
		}
	}
	s.Reset()
	if got := s.Observe(sys); got != 0 {
		t.Errorf("after Reset: %d", got)
	}
}

// BenchmarkKVCacheAdmit is the cache's cost for a 1000-token prompt on a
// warm cache that evicts.
//
//	go test -run '^$' -bench KVCacheAdmit -benchmem ./bench/mock/
func BenchmarkKVCacheAdmit(b *testing.B) {
	c := newKVCache(64*1024, 16)
	prompts := make([][]int32, 200)
	for i := range prompts {
		prompts[i] = cat(seq(0, 500), seq(i*3000+1000, 500))
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		c.admit(prompts[i%len(prompts)])
	}
}
