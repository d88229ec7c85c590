package policy

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"pdlb/config"
	"pdlb/proxy"
)

func newTestCacheAware(t testing.TB, mutate func(*config.CacheAware)) *CacheAware {
	t.Helper()
	c := config.Default().Policy.CacheAware
	if mutate != nil {
		mutate(&c)
	}
	p, err := newCacheAware(proxy.Prefill, c)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCacheAwarePick(t *testing.T) {
	p16 := text(seq(100, 16)...) // a prompt of 16 blocks
	cases := []struct {
		name   string
		params func(*config.CacheAware)
		n      int              // backends
		warm   map[int][][]byte // prompts each backend was chosen for, in order
		loads  []int            // in flight per backend
		cands  []int            // the pool (default: all)
		ok     []int            // the acceptable (default: all of cands)
		prompt []byte
		want   []int // any of these
		ratio  float64
	}{
		{name: "affinity", n: 3, warm: map[int][][]byte{1: {p16}}, loads: []int{0, 2, 0},
			prompt: p16, want: []int{1}, ratio: 1},
		{name: "affinity for a longer prompt", n: 3, warm: map[int][][]byte{1: {p16}},
			prompt: text(seq(100, 32)...), want: []int{1}, ratio: 0.5},
		{name: "below the match threshold: least loaded", n: 3, warm: map[int][][]byte{1: {text(100, 101, 102)}},
			loads: []int{1, 0, 2}, prompt: p16, want: []int{1}, ratio: 3.0 / 16},
		{name: "below the match threshold, matching one more loaded", n: 3, warm: map[int][][]byte{1: {text(100, 101, 102)}},
			loads: []int{0, 1, 2}, prompt: p16, want: []int{0}, ratio: 0},
		{name: "match threshold 0 follows any match", params: func(c *config.CacheAware) { c.MatchThreshold = 0 },
			n: 3, warm: map[int][][]byte{1: {text(100)}}, loads: []int{0, 1, 0}, prompt: p16, want: []int{1}, ratio: 1.0 / 16},
		{name: "the longest match wins over a less loaded shorter one", n: 3,
			warm:  map[int][][]byte{0: {p16}, 1: {text(seq(100, 8)...)}},
			loads: []int{5, 0, 0}, prompt: p16, want: []int{0}, ratio: 1},
		{name: "equal matches: fewer in flight", n: 3, warm: map[int][][]byte{0: {p16}, 1: {p16}},
			loads: []int{3, 1, 0}, prompt: p16, want: []int{1}, ratio: 1},
		{name: "equal matches and loads: either", n: 3, warm: map[int][][]byte{0: {p16}, 2: {p16}},
			loads: []int{1, 0, 1}, prompt: p16, want: []int{0, 2}, ratio: 1},
		// Loads 100, 40, 0: mean 46.7; 100 > 46.7+32 and > 1.5×0, so 0 is
		// overloaded; 40 is not. SGLang would send both to 2.
		{name: "overloaded backend left out", n: 3, warm: map[int][][]byte{0: {p16}, 1: {text(seq(500, 16)...)}},
			loads: []int{100, 40, 0}, prompt: p16, want: []int{2}, ratio: 0},
		{name: "the others keep their affinity while one is overloaded", n: 3,
			warm:  map[int][][]byte{0: {p16}, 1: {text(seq(500, 16)...)}},
			loads: []int{100, 40, 0}, prompt: text(seq(500, 16)...), want: []int{1}, ratio: 1},
		// Loads 10, 6, 6: mean 7.3; 10 > 7.3+2 but not > 2×6.
		{name: "under the relative threshold: not overloaded",
			params: func(c *config.CacheAware) { c.BalanceAbsThreshold, c.BalanceRelThreshold = 2, 2 },
			n:      3, warm: map[int][][]byte{0: {p16}}, loads: []int{10, 6, 6}, prompt: p16, want: []int{0}, ratio: 1},
		{name: "over both thresholds: overloaded",
			params: func(c *config.CacheAware) { c.BalanceAbsThreshold, c.BalanceRelThreshold = 2, 1.5 },
			n:      3, warm: map[int][][]byte{0: {p16}}, loads: []int{10, 6, 6}, prompt: p16, want: []int{1, 2}, ratio: 0},
		// 10 > 7.3+3 is false: within the absolute threshold.
		{name: "under the absolute threshold: not overloaded",
			params: func(c *config.CacheAware) { c.BalanceAbsThreshold, c.BalanceRelThreshold = 3, 1 },
			n:      3, warm: map[int][][]byte{0: {p16}}, loads: []int{10, 6, 6}, prompt: p16, want: []int{0}, ratio: 1},
		{name: "a new prefix goes to the least loaded", n: 4, warm: map[int][][]byte{0: {p16}},
			loads: []int{2, 3, 1, 4}, prompt: text(seq(900, 16)...), want: []int{2}, ratio: 0},
		{name: "equal loads: the backend holding least", n: 3,
			warm:   map[int][][]byte{0: {text(seq(1000, 32)...)}, 1: {text(seq(2000, 8)...)}, 2: {text(seq(3000, 16)...)}},
			prompt: text(seq(900, 16)...), want: []int{1}, ratio: 0},
		{name: "a prompt shorter than a block", n: 3, warm: map[int][][]byte{0: {p16}},
			loads: []int{1, 0, 1}, prompt: []byte(`"hi"`), want: []int{1}, ratio: 0},
		{name: "no prompt", n: 2, loads: []int{1, 0}, want: []int{1}, ratio: 0},
		{name: "a backend not in the pool is never returned", n: 4, warm: map[int][][]byte{3: {p16}},
			loads: []int{1, 0, 2, 0}, cands: []int{0, 1, 2}, prompt: p16, want: []int{1}, ratio: 0},
		{name: "an unacceptable backend is never returned", n: 3, warm: map[int][][]byte{0: {p16}},
			ok: []int{1, 2}, loads: []int{0, 1, 0}, prompt: p16, want: []int{2}, ratio: 0},
		{name: "the only acceptable backend, however loaded", n: 3, loads: []int{90, 0, 0}, ok: []int{0},
			prompt: p16, want: []int{0}, ratio: 0},
		{name: "nothing acceptable", n: 3, ok: []int{}, prompt: p16, want: nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bs := backends(t, c.n)
			p := newTestCacheAware(t, c.params)
			for i := range c.n {
				for _, w := range c.warm[i] {
					p.Chosen(Request{Prompt: w}, bs[i])
				}
			}
			for i, n := range c.loads {
				withInFlight(t, bs[i], n)
			}
			pick := func(idx []int) []*proxy.Backend {
				out := []*proxy.Backend{}
				for _, i := range idx {
					out = append(out, bs[i])
				}
				return out
			}
			cands := bs
			if c.cands != nil {
				cands = pick(c.cands)
			}
			ok := all
			if c.ok != nil {
				ok = only(pick(c.ok)...)
			}
			for range 20 { // ties are drawn at random
				b, why := p.Pick(Request{Prompt: c.prompt}, cands, ok)
				if c.want == nil {
					if b != nil {
						t.Fatalf("picked %s, want none", b.URL)
					}
					return
				}
				if !slices.Contains(pick(c.want), b) {
					t.Fatalf("picked %v, want one of backends %v", b, c.want)
				}
				if why != (Reason{"prefill_prefix_match", c.ratio}) {
					t.Fatalf("reason %v, want prefill_prefix_match %v", why, c.ratio)
				}
			}
		})
	}
}

// With equal loads, new prefixes go round the backends by what their trees
// hold, and a returning prefix finds its backend again.
func TestCacheAwareSpreadsNewPrefixes(t *testing.T) {
	bs := backends(t, 4)
	p := newTestCacheAware(t, nil)
	first := map[int]*proxy.Backend{}
	got := map[*proxy.Backend]int{}
	for i := range 400 {
		req := Request{Prompt: text(seq(i*1000, 8)...)}
		b, _ := p.Pick(req, bs, all)
		p.Chosen(req, b)
		first[i] = b
		got[b]++
	}
	for _, b := range bs {
		if got[b] < 90 || got[b] > 110 {
			t.Errorf("%s got %d of 400 new prefixes, want about 100", b.URL, got[b])
		}
	}
	for i := range 400 {
		if b, why := p.Pick(Request{Prompt: text(seq(i*1000, 8)...)}, bs, all); b != first[i] || why.Value != 1 {
			t.Fatalf("prefix %d went to %v (%v), want its first backend %s", i, b, why, first[i].URL)
		}
	}
}

// A backend removed from the pool is forgotten at the next Chosen; the same
// URL added back as a new backend starts cold.
func TestCacheAwareForgetsRemovedBackends(t *testing.T) {
	bs := backends(t, 3)
	p := newTestCacheAware(t, nil)
	prompt := text(seq(1, 16)...)
	p.Chosen(Request{Prompt: prompt}, bs[2])
	if b, _ := p.Pick(Request{Prompt: prompt}, bs, all); b != bs[2] {
		t.Fatal("no affinity to start with")
	}
	pool := bs[:2]
	if b, _ := p.Pick(Request{Prompt: prompt}, pool, all); b == bs[2] {
		t.Fatal("picked a backend no longer in the pool")
	}
	p.Chosen(Request{Prompt: text(7)}, bs[0])
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.tree.tenantOf(bs[2]) != nil {
		t.Fatal("the removed backend is still in the tree")
	}
	checkTree(t, p.tree)
}

// Many requests pick and learn at once while the pool changes; under -race
// this checks the locking, and every pick is from the pool it was given.
func TestCacheAwareConcurrent(t *testing.T) {
	bs := backends(t, 6)
	p := newTestCacheAware(t, func(c *config.CacheAware) { c.MaxTreeBytes = 256 << 10 })
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for i := range 2000 {
				pool := bs[:3+rng.IntN(4)] // backends come and go
				req := Request{Prompt: text(rng.IntN(4), rng.IntN(8), rng.IntN(50), i)}
				b, _ := p.Pick(req, pool, all)
				if !slices.Contains(pool, b) {
					t.Errorf("picked %v, not in the pool", b)
					return
				}
				p.Chosen(req, b)
			}
		})
	}
	wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	checkTree(t, p.tree)
	if p.tree.bytes > p.tree.maxBytes {
		t.Fatalf("%d bytes over the cap %d", p.tree.bytes, p.tree.maxBytes)
	}
}

// A request whose prefix is known costs no allocation.
func TestCacheAwareAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	bs := backends(t, 4)
	p := newTestCacheAware(t, nil)
	req := Request{Prompt: text(seq(1, 256)...)}
	p.Chosen(req, bs[1])
	if n := testing.AllocsPerRun(200, func() {
		b, _ := p.Pick(req, bs, all)
		p.Chosen(req, b)
	}); n != 0 {
		t.Fatalf("%v allocations per request", n)
	}
}

// Chosen reuses the hashes Pick left in a scratch only for the same bytes.
func TestCacheAwareReusesHashesOfTheSamePrompt(t *testing.T) {
	p := newTestCacheAware(t, nil)
	s := &cacheAwareScratch{}
	a, b := text(seq(1, 8)...), text(seq(1, 7)...)
	b = append(b, text(99)...) // same length, last block differs
	for _, prompt := range [][]byte{a, a, b, a, nil, b} {
		p.hashesOf(s, prompt)
		if want := p.tree.blocks(prompt, nil); !slices.Equal(s.hashes, want) {
			t.Fatalf("hashes of %.20q... are %x, want %x", prompt, s.hashes, want)
		}
	}
	big := make([]byte, maxKeptPrompt+1)
	if p.hashesOf(s, big); len(s.prompt) != 0 || len(s.hashes) != len(big)/64 {
		t.Fatalf("kept %d bytes of a prompt over %d (hashes %d)", len(s.prompt), maxKeptPrompt, len(s.hashes))
	}
	// The caller's buffer is reused for another prompt: no stale hashes.
	buf := append([]byte(nil), a...)
	p.hashesOf(s, buf)
	copy(buf, b)
	if p.hashesOf(s, buf); !slices.Equal(s.hashes, p.tree.blocks(b, nil)) {
		t.Fatal("hashes of a rewritten buffer were reused")
	}
}

func TestNewCacheAwareRefusesInvalid(t *testing.T) {
	c := config.Default().Policy
	c.CacheAware.BlockBytes = 0
	if p, err := New("cache_aware", proxy.Decode, c); err == nil || p != nil {
		t.Fatalf("built %v from a block size of 0", p)
	}
	if p, err := New("cache_aware", proxy.Decode, config.Default().Policy); err != nil || p.(*CacheAware).reasonKey != "decode_prefix_match" {
		t.Fatalf("default parameters: %v", err)
	}
}

// benchPrompts are n prompts of size bytes: a shared system prompt (a
// quarter) and the rest their own, as JSON text. Built once per shape.
var benchPrompts = struct {
	sync.Mutex
	m map[[2]int][][]byte
}{m: map[[2]int][][]byte{}}

func prompts(n, size int) [][]byte {
	benchPrompts.Lock()
	defer benchPrompts.Unlock()
	if ps, ok := benchPrompts.m[[2]int{n, size}]; ok {
		return ps
	}
	rng := rand.New(rand.NewPCG(uint64(n), uint64(size)))
	const letters = "abcdefghijklmnopqrstuvwxyz     "
	word := func(dst []byte, k int) []byte {
		for range k {
			dst = append(dst, letters[rng.IntN(len(letters))])
		}
		return dst
	}
	system := word(nil, size/4)
	ps := make([][]byte, n)
	for i := range ps {
		b := append(make([]byte, 0, size), `"`...)
		b = append(b, system...)
		b = strconv.AppendInt(b, int64(i), 10)
		b = word(b, size-len(b)-1)
		ps[i] = append(b, `"`...)
	}
	benchPrompts.m[[2]int{n, size}] = ps
	return ps
}

// BenchmarkCacheAwarePick is one request's cost, Pick and Chosen, with 4
// backends that have been chosen for 1,000 prompts each (2 KB or 16 KB,
// sharing a quarter), the tree then full. "known" sends those prompts
// again, in turn (the tree is walked and touched); "new" writes the
// request's number at three quarters of each, so each request adds a leaf
// and evicts as much. Each request reads its prompt from a set of 8 or
// 64 MB, out of the CPU caches (the request path finds it cached, having
// just parsed it); "new" pays that in its copy. -cpu 1,2 shows the lock's
// contention.
//
//	go test -run '^$' -bench CacheAwarePick -benchtime 20000x -cpu 1,2 ./router/policy/
func BenchmarkCacheAwarePick(b *testing.B) {
	for _, size := range []int{2 << 10, 16 << 10} {
		bs := benchBackends(b, 4)
		ps := prompts(4000, size)
		for _, kind := range []string{"known", "new"} {
			b.Run(strconv.Itoa(size>>10)+"KB/"+kind, func(b *testing.B) {
				p := newTestCacheAware(b, nil)
				for i, pr := range ps {
					p.Chosen(Request{Prompt: pr}, bs[i%4])
				}
				// Full: a new prompt evicts as much as it adds.
				p.tree.maxBytes = p.tree.bytes + p.tree.bytes/64
				b.ReportAllocs()
				b.ResetTimer()
				var seq atomic.Uint64
				b.RunParallel(func(pb *testing.PB) {
					var buf []byte
					var digits [20]byte
					for pb.Next() {
						i := seq.Add(1)
						req := Request{Prompt: ps[i%uint64(len(ps))]}
						if kind == "new" {
							buf = append(buf[:0], req.Prompt...)
							copy(buf[len(buf)*3/4:], strconv.AppendUint(digits[:0], i, 10))
							req.Prompt = buf
						}
						c, _ := p.Pick(req, bs, all)
						p.Chosen(req, c)
					}
				})
				b.StopTimer()
				p.mu.RLock()
				b.ReportMetric(float64(p.tree.bytes), "tree-bytes")
				p.mu.RUnlock()
			})
		}
	}
}
