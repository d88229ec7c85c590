package policy

import (
	"strconv"
	"strings"
	"testing"

	"pdlb/config"
	"pdlb/proxy"
)

func prefixHashPolicy(t testing.TB, prefixBytes int) *PrefixHash {
	t.Helper()
	c := config.Default().Policy.PrefixHash
	c.PrefixBytes = prefixBytes
	p, err := newPrefixHash(proxy.Decode, c)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPrefixHashKey: the key is the prompt's first prefix_bytes, or the
// whole of a shorter prompt. Hashing a prompt's key bytes as a routing key
// (consistent_hashing) must land where prefix_hash does.
func TestPrefixHashKey(t *testing.T) {
	bs := backends(t, 8)
	p := prefixHashPolicy(t, 32)
	byKey := sessionPolicy(t)
	system := `"You are a terse assistant. Answer in one line.`
	cases := []struct {
		name, prompt, key string
	}{
		{"long: its first 32 bytes", system + ` Q: 2+2?"`, system[:32]},
		{"another tail, same key", system + ` Q: the capital of France?"`, system[:32]},
		{"exactly 32 bytes: whole", system[:32], system[:32]},
		{"shorter: whole", `"hi"`, `"hi"`},
		{"input_ids", `[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]`, `[1,2,3,4,5,6,7,8,9,10,11,12,13,1`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, why := p.Pick(Request{Prompt: []byte(c.prompt)}, bs, all)
			want, _ := byKey.Pick(Request{Key: c.key}, bs, all)
			if got != want || why != (Reason{"decode_hash_rank", 0}) {
				t.Fatalf("picked %s (%v), want %s, the home of %q", got.URL, why, want.URL, c.key)
			}
		})
	}
}

// Prompts that differ within the prefix spread over the backends.
func TestPrefixHashSpreads(t *testing.T) {
	bs := backends(t, 4)
	p := prefixHashPolicy(t, 1024)
	homes := map[*proxy.Backend]int{}
	for i := range 4000 {
		prompt := `"user ` + strconv.Itoa(i) + `: ` + strings.Repeat("same tail ", 200) + `"`
		b, _ := p.Pick(Request{Prompt: []byte(prompt)}, bs, all)
		homes[b]++
	}
	for i, b := range bs {
		if n := homes[b]; n < 850 || n > 1150 {
			t.Errorf("backend %d is home to %d of 4000 prompts, want about 1000", i, n)
		}
	}
}

// A request without a prompt has no key: the less loaded of two random
// backends, logged as rank -1.
func TestPrefixHashNoPrompt(t *testing.T) {
	bs := backends(t, 3)
	withInFlight(t, bs[0], 2)
	p := prefixHashPolicy(t, 1024)
	for range 50 {
		b, why := p.Pick(Request{}, bs, only(bs[0], bs[2]))
		if b != bs[2] || why != (Reason{"decode_hash_rank", -1}) {
			t.Fatalf("picked %v (%v), want the less loaded backend, rank -1", b, why)
		}
	}
	if b, why := p.Pick(Request{}, bs, only()); b != nil || why != (Reason{}) {
		t.Fatalf("picked %v (%v) with nothing acceptable", b, why)
	}
}

func TestNewHashPolicies(t *testing.T) {
	def := config.Default().Policy
	for _, name := range []string{"prefix_hash", "consistent_hashing"} {
		if p, err := New(name, proxy.Prefill, def); err != nil || p == nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if p, _ := New("consistent_hashing", proxy.Prefill, def); p.(Keyed).KeyHeader() != "X-Session-ID" {
		t.Error("consistent_hashing does not ask for its header")
	}
	if _, keyed := Policy(prefixHashPolicy(t, 1)).(Keyed); keyed {
		t.Error("prefix_hash asks for a key header")
	}
	bad := []struct {
		name string
		edit func(*config.Policy)
		want string
	}{
		{"prefix_hash", func(c *config.Policy) { c.PrefixHash.PrefixBytes = 0 }, "prefix_bytes 0"},
		{"prefix_hash", func(c *config.Policy) { c.PrefixHash.LoadFactor = 0.5 }, "load_factor 0.5"},
		{"consistent_hashing", func(c *config.Policy) { c.ConsistentHashing.Header = "" }, "header is required"},
		{"consistent_hashing", func(c *config.Policy) { c.ConsistentHashing.LoadFactor = 0 }, "load_factor 0"},
	}
	for _, c := range bad {
		cfg := config.Default().Policy
		c.edit(&cfg)
		if _, err := New(c.name, proxy.Decode, cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
}

// BenchmarkPrefixHashPick: one pick for an 8 KiB prompt (1,024 bytes
// hashed) among n backends. 0 allocs/op.
func BenchmarkPrefixHashPick(b *testing.B) {
	prompt := []byte(`"` + strings.Repeat("You are a helpful assistant. ", 280) + `"`)
	for _, n := range []int{4, 16, 64} {
		b.Run("backends="+strconv.Itoa(n), func(b *testing.B) {
			bs := benchBackends(b, n)
			p := prefixHashPolicy(b, config.Default().Policy.PrefixHash.PrefixBytes)
			req := Request{Prompt: prompt}
			b.ReportAllocs()
			for b.Loop() {
				if c, _ := p.Pick(req, bs, all); c == nil {
					b.Fatal("no pick")
				}
			}
		})
	}
}
