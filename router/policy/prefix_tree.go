package policy

import (
	"hash/maphash"
	"slices"
	"unsafe"

	"pdlb/proxy"
)

// prefixTree approximates what each backend's prefix cache holds: one
// radix tree over the prompts sent to the backends of a role, each node
// marked with the backends (tenants) that hold it, as SGLang's router does.
// A shared tree stores a prefix common to several backends once.
//
// Keys are blocks: a prompt's raw bytes cut into blocks of blockBytes from
// its start, each hashed to 64 bits, the ragged tail dropped. Two prompts
// with the same first k blocks share a path of k hashes, so matching
// compares 8 bytes per block and the tree holds 8 bytes per block (an
// eighth of the text at 64-byte blocks). A collision could only extend a
// match by a block, and the hash is seeded per tree.
//
// Memory is bounded: bytes counts what the nodes, edges and memberships
// hold (the size model below), and an insert that takes it over maxBytes
// evicts, from the tenant holding the most blocks, its least recently used
// leaf, until it is under again. Each tenant keeps its memberships in one
// LRU list in which a node is always ahead of (more recent than) its
// descendants (a path is touched deepest first), so the tail is always one
// of the tenant's leaves and evicting a node costs O(1) (after a scan of
// the tenants for the largest), with no clock and no background sweep.
//
// prefixTree is not safe for concurrent use; CacheAware guards it. match
// only reads.
type prefixTree struct {
	blockBytes int
	// maxBlocks bounds one insert (and so the depth of the tree): a single
	// huge prompt may take at most a sixteenth of maxBytes.
	maxBlocks int
	maxBytes  int64
	bytes     int64
	seed      maphash.Seed
	root      node
	tenants   map[*proxy.Backend]*tenant
	// slots index the tenants densely for match's scratch; nil is free.
	slots []*tenant
}

// tenant is one backend's share of the tree.
type tenant struct {
	b    *proxy.Backend
	slot int
	// blocks is the number of blocks the tenant holds: what its engine's
	// cache would hold of the prompts sent to it.
	blocks int
	// head is the most recently used membership, tail the least.
	head, tail *member
}

// member records that a tenant holds a node; it is a link of the tenant's
// LRU list.
type member struct {
	t          *tenant
	n          *node
	prev, next *member // toward head, toward tail
}

// node is one edge of the radix tree: a run of block hashes with the same
// holders. The root has no edge and no members.
type node struct {
	edge     []uint64
	parent   *node
	children map[uint64]*node // by the first hash of the child's edge
	members  []*member
	// first and firstSlot hold a node's first membership and its slot in
	// members inline: most nodes have one holder, and a new prompt then
	// costs two allocations (node and edge) instead of four.
	first     member
	firstSlot [1]*member
}

// The size model: what the heap holds for each part, measured against
// runtime.MemStats in TestPrefixTreeMemoryWithinCap. A node costs its
// struct (with its first membership) and its slot in the parent's map; a
// map costs a header and a group of slots; a further member costs its
// struct and its pointer in the node's members slice (with room for
// growth).
const (
	edgeBytesPerBlock = 8
	nodeBytes         = int64(unsafe.Sizeof(node{})) + 32
	mapBytes          = 48 + 8 + 8*16
	memberBytes       = int64(unsafe.Sizeof(member{})) + 16
)

func newPrefixTree(blockBytes int, maxBytes int64) *prefixTree {
	return &prefixTree{
		blockBytes: blockBytes,
		maxBlocks:  max(1, int(maxBytes/16/edgeBytesPerBlock)),
		maxBytes:   maxBytes,
		seed:       maphash.MakeSeed(),
		tenants:    map[*proxy.Backend]*tenant{},
	}
}

// blocks appends to dst the hashes of prompt's whole blocks, at most
// maxBlocks of them.
func (t *prefixTree) blocks(prompt []byte, dst []uint64) []uint64 {
	n := min(len(prompt)/t.blockBytes, t.maxBlocks)
	for i := range n {
		dst = append(dst, maphash.Bytes(t.seed, prompt[i*t.blockBytes:(i+1)*t.blockBytes]))
	}
	return dst
}

// match sets matched[slot] to the number of leading blocks of hashes that
// each tenant holds (0 for the others) and returns matched, grown to one
// entry per slot.
func (t *prefixTree) match(hashes []uint64, matched []int32) []int32 {
	matched = append(matched[:0], make([]int32, len(t.slots))...)
	cur, i := &t.root, 0
	for i < len(hashes) {
		c := cur.children[hashes[i]]
		if c == nil {
			break
		}
		k := commonPrefix(c.edge, hashes[i:])
		i += k
		for _, m := range c.members {
			matched[m.t.slot] = int32(i)
		}
		if k < len(c.edge) {
			break
		}
		cur = c
	}
	return matched
}

// tenantOf returns b's tenant or nil.
func (t *prefixTree) tenantOf(b *proxy.Backend) *tenant { return t.tenants[b] }

// insert records that b now holds the prompt whose block hashes are
// hashes: every node of its path becomes b's most recently used, new
// blocks get new nodes, and the tree is evicted down to maxBytes. path is
// scratch, returned for reuse.
func (t *prefixTree) insert(b *proxy.Backend, hashes []uint64, path []*node) []*node {
	if len(hashes) == 0 {
		return path
	}
	ten := t.tenants[b]
	if ten == nil {
		ten = t.addTenant(b)
	}
	path = path[:0]
	cur, i := &t.root, 0
	for i < len(hashes) {
		c := cur.children[hashes[i]]
		if c == nil {
			c = t.addLeaf(cur, hashes[i:])
		} else if k := commonPrefix(c.edge, hashes[i:]); k < len(c.edge) {
			c = t.split(c, k)
		}
		if c.memberOf(ten) == nil {
			t.addMember(c, ten)
		}
		path = append(path, c)
		i += len(c.edge)
		cur = c
	}
	// Deepest first, so each node ends ahead of its descendants.
	for j := len(path) - 1; j >= 0; j-- {
		ten.moveToFront(path[j].memberOf(ten))
	}
	clear(path)
	t.evict()
	return path
}

// evict removes least recently used leaves of the tenant holding the most
// blocks until the tree is within maxBytes.
func (t *prefixTree) evict() {
	for t.bytes > t.maxBytes {
		var victim *tenant
		for _, ten := range t.slots {
			if ten != nil && ten.tail != nil && (victim == nil || ten.blocks > victim.blocks) {
				victim = ten
			}
		}
		if victim == nil {
			return
		}
		t.removeMember(victim.tail)
	}
}

// forgetAbsent forgets every tenant whose backend is not in present (the
// role's whole pool) except keep: those backends were removed.
func (t *prefixTree) forgetAbsent(present []*proxy.Backend, keep *proxy.Backend) {
	for b, ten := range t.tenants {
		if b != keep && !slices.Contains(present, b) {
			t.forget(ten)
		}
	}
}

// forget removes a tenant and everything it holds.
func (t *prefixTree) forget(ten *tenant) {
	for ten.tail != nil {
		t.removeMember(ten.tail)
	}
	delete(t.tenants, ten.b)
	t.slots[ten.slot] = nil
	for len(t.slots) > 0 && t.slots[len(t.slots)-1] == nil {
		t.slots = t.slots[:len(t.slots)-1]
	}
}

func (t *prefixTree) addTenant(b *proxy.Backend) *tenant {
	ten := &tenant{b: b, slot: len(t.slots)}
	for i, s := range t.slots {
		if s == nil {
			ten.slot = i
			break
		}
	}
	if ten.slot == len(t.slots) {
		t.slots = append(t.slots, nil)
	}
	t.slots[ten.slot] = ten
	t.tenants[b] = ten
	return ten
}

// addLeaf hangs a new node with a copy of hashes under parent.
func (t *prefixTree) addLeaf(parent *node, hashes []uint64) *node {
	n := &node{edge: append([]uint64(nil), hashes...), parent: parent}
	t.link(parent, n)
	t.bytes += nodeBytes + int64(len(n.edge))*edgeBytesPerBlock
	return n
}

// split cuts c's edge after k blocks: a new node takes the first k, with
// c's holders (each membership just ahead of c's), and c keeps the rest as
// its only child. Both edges are copied so no backing array outlives its
// accounting.
func (t *prefixTree) split(c *node, k int) *node {
	parent := c.parent
	mid := &node{edge: append([]uint64(nil), c.edge[:k]...), parent: parent}
	parent.children[mid.edge[0]] = mid // the same key as c's
	c.edge = append([]uint64(nil), c.edge[k:]...)
	c.parent = mid
	mid.children = map[uint64]*node{c.edge[0]: c}
	t.bytes += nodeBytes + mapBytes
	for _, mc := range c.members {
		mc.t.insertBefore(t.newMember(mid, mc.t), mc)
	}
	return mid
}

func (t *prefixTree) link(parent, n *node) {
	if parent.children == nil {
		parent.children = map[uint64]*node{}
		t.bytes += mapBytes
	}
	parent.children[n.edge[0]] = n
}

func (t *prefixTree) addMember(n *node, ten *tenant) {
	ten.pushFront(t.newMember(n, ten))
	ten.blocks += len(n.edge)
}

// newMember adds ten to n's holders; the caller links it into ten's list
// and counts its blocks.
func (t *prefixTree) newMember(n *node, ten *tenant) *member {
	var m *member
	if n.first.t == nil {
		m = &n.first
		if n.members == nil {
			n.members = n.firstSlot[:0]
		}
	} else {
		m = &member{}
		t.bytes += memberBytes
	}
	*m = member{t: ten, n: n}
	n.members = append(n.members, m)
	return m
}

// removeMember drops one membership, which must be a leaf of its tenant;
// a node left without holders goes (it has no children: they would have
// holders, who hold it too). A node left with one child is not merged with
// it: the branch that split it often comes back (a new question on the
// same context), and merging would make each such request split again.
func (t *prefixTree) removeMember(m *member) {
	ten, n := m.t, m.n
	ten.unlink(m)
	ten.blocks -= len(n.edge)
	for i, x := range n.members {
		if x == m {
			last := len(n.members) - 1
			n.members[i], n.members[last] = n.members[last], nil
			n.members = n.members[:last]
			break
		}
	}
	if m == &n.first {
		n.first = member{}
	} else {
		t.bytes -= memberBytes
	}
	if len(n.members) > 0 {
		return
	}
	parent := n.parent
	delete(parent.children, n.edge[0])
	t.bytes -= nodeBytes + int64(len(n.edge))*edgeBytesPerBlock
	if len(parent.children) == 0 {
		parent.children = nil
		t.bytes -= mapBytes
	}
}

func (n *node) memberOf(ten *tenant) *member {
	for _, m := range n.members {
		if m.t == ten {
			return m
		}
	}
	return nil
}

func (ten *tenant) pushFront(m *member) {
	m.prev, m.next = nil, ten.head
	if ten.head != nil {
		ten.head.prev = m
	} else {
		ten.tail = m
	}
	ten.head = m
}

// insertBefore links m just ahead of (more recent than) at.
func (ten *tenant) insertBefore(m, at *member) {
	m.prev, m.next = at.prev, at
	if at.prev != nil {
		at.prev.next = m
	} else {
		ten.head = m
	}
	at.prev = m
}

func (ten *tenant) unlink(m *member) {
	if m.prev != nil {
		m.prev.next = m.next
	} else {
		ten.head = m.next
	}
	if m.next != nil {
		m.next.prev = m.prev
	} else {
		ten.tail = m.prev
	}
	m.prev, m.next = nil, nil
}

func (ten *tenant) moveToFront(m *member) {
	if ten.head == m {
		return
	}
	ten.unlink(m)
	ten.pushFront(m)
}

// commonPrefix is the number of leading elements a and b share.
func commonPrefix(a, b []uint64) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}
