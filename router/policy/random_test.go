package policy

import "testing"

func TestRandomPicksOnlyAcceptableUniformly(t *testing.T) {
	bs := backends(t, 5)
	got := counts(Random{}, bs, only(bs[1], bs[3]), 4000)
	if len(got) != 2 {
		t.Fatalf("picked %d distinct backends, want only the 2 acceptable ones", len(got))
	}
	for _, b := range []int{1, 3} {
		// 2,000 expected; the binomial spread is about 32, so 1,700–2,300
		// fails only when the draw is not uniform.
		if n := got[bs[b]]; n < 1700 || n > 2300 {
			t.Errorf("backend %d picked %d of 4000 times, want about half", b, n)
		}
	}
}

func TestRandomNothingAcceptable(t *testing.T) {
	bs := backends(t, 3)
	if b, _ := (Random{}).Pick(Request{}, bs, only()); b != nil {
		t.Fatalf("picked %s with nothing acceptable", b.URL)
	}
	if b, _ := (Random{}).Pick(Request{}, nil, all); b != nil {
		t.Fatal("picked from no candidates")
	}
}
