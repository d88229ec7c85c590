package policy

import (
	"testing"

	"pdlb/config"
	"pdlb/proxy"
)

func TestPowerOfTwo(t *testing.T) {
	bs := backends(t, 4)
	withInFlight(t, bs[0], 5)
	withInFlight(t, bs[1], 1)
	withInFlight(t, bs[3], 9)
	p := newPowerOfTwo(proxy.Decode)

	// Of two, the one with fewer in flight always wins.
	for range 200 {
		if b, why := p.Pick(Request{}, bs, only(bs[0], bs[3])); b != bs[0] || why != (Reason{"decode_in_flight", 5}) {
			t.Fatalf("picked %v (%v), want the less loaded backend 0", b, why)
		}
	}
	// Over all four, the most loaded is never picked (it loses every draw
	// it is in) and the least loaded (bs[2], 0 in flight) most often: it
	// wins every draw it is in, half of all draws.
	got := counts(p, bs, all, 3000)
	if got[bs[3]] != 0 {
		t.Fatalf("the most loaded backend was picked %d times", got[bs[3]])
	}
	if n := got[bs[2]]; n < 1300 || n > 1700 {
		t.Fatalf("the least loaded backend won %d of 3000 draws, want about 1500", n)
	}
	// One acceptable backend is picked whatever its load; none, nothing.
	if b, _ := p.Pick(Request{}, bs, only(bs[3])); b != bs[3] {
		t.Fatal("the only acceptable backend was not picked")
	}
	if b, _ := p.Pick(Request{}, bs, only()); b != nil {
		t.Fatal("picked with nothing acceptable")
	}
}

func TestNewByName(t *testing.T) {
	for _, name := range []string{"random", "round_robin", "power_of_two"} {
		if p, err := New(name, proxy.Prefill, config.Default().Policy); err != nil || p == nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := New("least_loaded", proxy.Prefill, config.Default().Policy); err == nil {
		t.Error("an unknown policy was built")
	}
}
