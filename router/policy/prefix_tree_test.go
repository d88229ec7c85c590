package policy

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"pdlb/proxy"
)

const testBlock = 64

// text builds a prompt of whole blocks, block i spelling ids[i], so two
// prompts share exactly the leading blocks whose ids are equal.
func text(ids ...int) []byte {
	out := make([]byte, 0, len(ids)*testBlock)
	for _, id := range ids {
		out = fmt.Appendf(out, "%0*d|", testBlock-1, id)
	}
	return out
}

// seq is the ids from, from+1, ..., n of them.
func seq(from, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = from + i
	}
	return out
}

func insertText(tr *prefixTree, b *proxy.Backend, prompt []byte) {
	tr.insert(b, tr.blocks(prompt, nil), nil)
}

// matchOf is the number of leading blocks of prompt that b holds.
func matchOf(tr *prefixTree, b *proxy.Backend, prompt []byte) int {
	m := tr.match(tr.blocks(prompt, nil), nil)
	if ten := tr.tenantOf(b); ten != nil {
		return int(m[ten.slot])
	}
	return 0
}

func TestPrefixTreeInsertMatch(t *testing.T) {
	bs := backends(t, 3)
	tr := newPrefixTree(testBlock, 1<<20)
	a := text(1, 2, 3, 4, 5, 6)
	insertText(tr, bs[0], a)
	insertText(tr, bs[1], text(1, 2, 9))                    // splits a's edge after 2 blocks
	insertText(tr, bs[1], append(text(1, 2, 3), "tail"...)) // the tail is no block
	cases := []struct {
		name   string
		b      int
		prompt []byte
		want   int
	}{
		{"whole prompt", 0, a, 6},
		{"longer prompt, stored prefix", 0, text(1, 2, 3, 4, 5, 6, 7, 8), 6},
		{"diverges in block 4", 0, text(1, 2, 3, 7, 5, 6), 3},
		{"ragged tail ignored", 0, append(text(1, 2, 3), "12345"...), 3},
		{"other first block", 0, text(2, 2, 3), 0},
		{"shared prefix of another backend", 1, a, 3},
		{"its own branch", 1, text(1, 2, 9, 9), 3},
		{"not held by 0", 0, text(1, 2, 9), 2},
		{"never chosen", 2, a, 0},
		{"shorter than a block", 0, []byte("1"), 0},
		{"empty", 0, nil, 0},
	}
	for _, c := range cases {
		if got := matchOf(tr, bs[c.b], c.prompt); got != c.want {
			t.Errorf("%s: backend %d matches %d blocks, want %d", c.name, c.b, got, c.want)
		}
	}
	checkTree(t, tr)
}

func TestPrefixTreeEvictsLeastRecentlyUsed(t *testing.T) {
	bs := backends(t, 1)
	// Room for 40 prompts of 16 blocks (one node each, its holder inline).
	per := nodeBytes + 16*edgeBytesPerBlock
	tr := newPrefixTree(testBlock, mapBytes+40*per+per/2)
	for i := range 40 {
		insertText(tr, bs[0], text(seq(i*100, 16)...))
	}
	if tr.bytes > tr.maxBytes || matchOf(tr, bs[0], text(seq(0, 16)...)) != 16 {
		t.Fatalf("40 prompts do not fit: %d bytes of %d", tr.bytes, tr.maxBytes)
	}
	// Touch prompt 0, then add 10 more: prompts 1..10 go, 0 stays.
	insertText(tr, bs[0], text(seq(0, 16)...))
	for i := 40; i < 50; i++ {
		insertText(tr, bs[0], text(seq(i*100, 16)...))
		if tr.bytes > tr.maxBytes {
			t.Fatalf("%d bytes over the cap %d", tr.bytes, tr.maxBytes)
		}
	}
	for i, want := range map[int]int{0: 16, 1: 0, 10: 0, 11: 16, 49: 16} {
		if got := matchOf(tr, bs[0], text(seq(i*100, 16)...)); got != want {
			t.Errorf("prompt %d matches %d blocks, want %d", i, got, want)
		}
	}
	checkTree(t, tr)
}

// A leaf goes before its ancestors: evicting a long prompt first shortens
// it to the prefix it shares with a more recent one.
func TestPrefixTreeEvictsLeavesFirst(t *testing.T) {
	bs := backends(t, 1)
	tr := newPrefixTree(testBlock, 1<<20)
	insertText(tr, bs[0], text(1, 2, 3, 4))
	insertText(tr, bs[0], text(1, 2, 7))
	tr.removeMember(tr.tenantOf(bs[0]).tail)
	if got := matchOf(tr, bs[0], text(1, 2, 3, 4)); got != 2 {
		t.Errorf("after one eviction the older prompt matches %d blocks, want its shared 2", got)
	}
	if got := matchOf(tr, bs[0], text(1, 2, 7)); got != 3 {
		t.Errorf("the recent prompt matches %d blocks, want 3", got)
	}
	checkTree(t, tr)
}

// Over the cap, the tenant holding the most gives way: a busy backend's
// churn does not evict a quiet one's prefixes.
func TestPrefixTreeEvictsFromLargestTenant(t *testing.T) {
	bs := backends(t, 2)
	tr := newPrefixTree(testBlock, 64<<10)
	quiet := text(seq(1_000_000, 32)...)
	insertText(tr, bs[0], quiet)
	for i := range 2000 {
		insertText(tr, bs[1], text(seq(i*100, 16)...))
		if tr.bytes > tr.maxBytes {
			t.Fatalf("insert %d: %d bytes over the cap %d", i, tr.bytes, tr.maxBytes)
		}
	}
	if got := matchOf(tr, bs[0], quiet); got != 32 {
		t.Errorf("the quiet backend's prompt matches %d blocks, want 32", got)
	}
	checkTree(t, tr)
}

func TestPrefixTreeForgetsRemovedBackends(t *testing.T) {
	bs := backends(t, 3)
	tr := newPrefixTree(testBlock, 1<<20)
	for i, b := range bs {
		insertText(tr, b, text(1, 2, 3, 10+i))
	}
	tr.forgetAbsent(bs[1:2], bs[2]) // 0 was removed; 2 is being inserted
	if tr.tenantOf(bs[0]) != nil || matchOf(tr, bs[0], text(1, 2, 3, 10)) != 0 {
		t.Fatal("backend 0 is still in the tree")
	}
	if matchOf(tr, bs[1], text(1, 2, 3, 11)) != 4 || matchOf(tr, bs[2], text(1, 2, 3, 12)) != 4 {
		t.Fatal("the backends still present lost their prefixes")
	}
	checkTree(t, tr)
	// A new backend reuses the free slot; forgetting all empties the tree.
	nb := backends(t, 4)[3]
	insertText(tr, nb, text(5))
	if tr.tenantOf(nb).slot != 0 {
		t.Errorf("new tenant got slot %d, want the freed 0", tr.tenantOf(nb).slot)
	}
	tr.forgetAbsent(nil, nil)
	if tr.bytes != 0 || len(tr.slots) != 0 || tr.root.children != nil {
		t.Fatalf("empty tree holds %d bytes, %d slots", tr.bytes, len(tr.slots))
	}
}

// Random inserts and forgets by several backends under a small cap: the
// accounting and the LRU order stay exact, and the cap holds throughout.
func TestPrefixTreeAccountingUnderChurn(t *testing.T) {
	bs := backends(t, 4)
	tr := newPrefixTree(testBlock, 48<<10)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 5000 {
		// Prompts share a few system prefixes and branch at random depths.
		ids := []int{rng.IntN(3)}
		for range rng.IntN(40) {
			ids = append(ids, rng.IntN(4))
		}
		switch b := bs[rng.IntN(len(bs))]; {
		case i%997 == 0:
			tr.forgetAbsent(bs[:2], nil)
		default:
			insertText(tr, b, text(ids...))
		}
		if tr.bytes > tr.maxBytes {
			t.Fatalf("step %d: %d bytes over the cap %d", i, tr.bytes, tr.maxBytes)
		}
		if i%250 == 0 {
			checkTree(t, tr)
		}
	}
	checkTree(t, tr)
}

// The tree's heap use, measured, stays within 1.5 times its count, so the
// cap bounds memory. Two shapes fill a tree to its cap: 16 KB prompts that
// share a 4 KB system prompt (long edges, as in the benchmark), and short
// prompts of a few blocks from a small alphabet (many small nodes, many
// holders each: the per-node overhead dominates).
func TestPrefixTreeMemoryWithinCap(t *testing.T) {
	if testing.Short() {
		t.Skip("fills trees of 16 and 4 MiB")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	shapes := []struct {
		name     string
		maxBytes int64
		prompt   func(dst []uint64) []uint64
	}{
		{"16 KB prompts, 4 KB shared", 16 << 20, func(dst []uint64) []uint64 {
			for j := range 256 {
				if j < 64 {
					dst = append(dst, uint64(j))
				} else {
					dst = append(dst, rng.Uint64())
				}
			}
			return dst
		}},
		{"branchy short prompts", 4 << 20, func(dst []uint64) []uint64 {
			for range 1 + rng.IntN(12) {
				dst = append(dst, uint64(rng.IntN(8)))
			}
			return dst
		}},
	}
	bs := backends(t, 8)
	for _, sh := range shapes {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		tr := newPrefixTree(64, sh.maxBytes)
		var hashes []uint64
		var path []*node
		for i := 0; tr.bytes < sh.maxBytes-sh.maxBytes/64 && i < 2_000_000; i++ {
			hashes = sh.prompt(hashes[:0])
			path = tr.insert(bs[rng.IntN(len(bs))], hashes, path)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		heap := int64(after.HeapAlloc) - int64(before.HeapAlloc)
		t.Logf("%s: the tree counts %d bytes (cap %d); the heap grew %d bytes (%.2f×)",
			sh.name, tr.bytes, sh.maxBytes, heap, float64(heap)/float64(tr.bytes))
		if tr.bytes < sh.maxBytes/2 {
			t.Errorf("%s: filled only %d bytes of %d", sh.name, tr.bytes, sh.maxBytes)
		}
		if heap > tr.bytes*3/2 || heap < tr.bytes/2 {
			t.Errorf("%s: the heap grew %d bytes for a tree that counts %d: the size model is off", sh.name, heap, tr.bytes)
		}
		runtime.KeepAlive(tr)
	}
}

// checkTree recomputes the tree's bytes and each tenant's blocks from
// scratch and checks the invariants eviction relies on: a holder of a
// node holds its parent, every non-root node has holders, and each
// tenant's LRU list has every node ahead of its descendants.
func checkTree(t *testing.T, tr *prefixTree) {
	t.Helper()
	var bytes int64
	blocks := map[*tenant]int{}
	var walk func(n *node)
	walk = func(n *node) {
		if n.children != nil {
			bytes += mapBytes
			if len(n.children) == 0 {
				t.Error("empty children map kept")
			}
		}
		for key, c := range n.children {
			if c.parent != n || len(c.edge) == 0 || c.edge[0] != key {
				t.Fatalf("child linked wrongly (parent ok %v, edge %d)", c.parent == n, len(c.edge))
			}
			if len(c.members) == 0 {
				t.Error("node without holders")
			}
			bytes += nodeBytes + int64(len(c.edge))*edgeBytesPerBlock
			for _, m := range c.members {
				if m != &c.first {
					bytes += memberBytes
				}
				blocks[m.t] += len(c.edge)
				if m.n != c {
					t.Error("member points at another node")
				}
				if n != &tr.root && n.memberOf(m.t) == nil {
					t.Error("a holder of a node does not hold its parent")
				}
			}
			walk(c)
		}
	}
	walk(&tr.root)
	if bytes != tr.bytes {
		t.Errorf("tree counts %d bytes, recount %d", tr.bytes, bytes)
	}
	for b, ten := range tr.tenants {
		if ten.b != b || tr.slots[ten.slot] != ten {
			t.Error("tenant index broken")
		}
		if ten.blocks != blocks[ten] {
			t.Errorf("tenant counts %d blocks, recount %d", ten.blocks, blocks[ten])
		}
		seen := map[*node]bool{}
		for m := ten.tail; m != nil; m = m.prev {
			if m.next != nil && m.next.prev != m {
				t.Fatal("LRU list broken")
			}
			for _, c := range m.n.children {
				if c.memberOf(ten) != nil && !seen[c] {
					t.Fatal("a node is behind its descendant in the LRU list")
				}
			}
			seen[m.n] = true
		}
	}
}
