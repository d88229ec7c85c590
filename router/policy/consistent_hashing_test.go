package policy

import (
	"strconv"
	"testing"

	"pdlb/config"
	"pdlb/proxy"
)

// A request without a routing key goes to the less loaded of two random
// backends, logged as rank -1; one with a key goes to its home.
func TestConsistentHashingWithoutKey(t *testing.T) {
	bs := backends(t, 2)
	p := sessionPolicy(t)
	home, _ := p.Pick(sessionKey(1), bs, all)
	other := bs[0]
	if other == home {
		other = bs[1]
	}
	withInFlight(t, home, 1)
	for range 50 {
		if b, why := p.Pick(Request{}, bs, all); b != other || why != (Reason{"decode_hash_rank", -1}) {
			t.Fatalf("picked %v (%v), want the less loaded backend, rank -1", b.URL, why)
		}
	}
	// With its home at 1 of ceil(1.5 × 2 ÷ 2) = 2, the key stays.
	if b, why := p.Pick(sessionKey(1), bs, all); b != home || why.Value != 0 {
		t.Fatalf("the key went to %s (%v), want its home", b.URL, why)
	}
}

// BenchmarkConsistentHashingPick: one pick for a UUID session key among n
// backends. 0 allocs/op.
func BenchmarkConsistentHashingPick(b *testing.B) {
	for _, n := range []int{4, 16, 64} {
		b.Run("backends="+strconv.Itoa(n), func(b *testing.B) {
			bs := benchBackends(b, n)
			p, err := newConsistentHashing(proxy.Prefill, config.Default().Policy.ConsistentHashing)
			if err != nil {
				b.Fatal(err)
			}
			req := Request{Key: "5b0c3e7e-8d9f-4a51-9c2e-" + strconv.Itoa(n) + "a1f3b7c9d2e"}
			b.ReportAllocs()
			for b.Loop() {
				if c, _ := p.Pick(req, bs, all); c == nil {
					b.Fatal("no pick")
				}
			}
		})
	}
}
