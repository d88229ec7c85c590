package policy

import (
	"testing"

	"pdlb/proxy"
)

func TestRoundRobin(t *testing.T) {
	bs := backends(t, 4)
	cases := []struct {
		name string
		ok   func(*proxy.Backend) bool
		want []int // indices picked by consecutive calls
	}{
		{"each in turn, wrapping", all, []int{0, 1, 2, 3, 0, 1}},
		{"skips the unacceptable", only(bs[0], bs[2]), []int{0, 2, 2, 0, 0, 2}},
		{"one acceptable", only(bs[3]), []int{3, 3, 3}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := &RoundRobin{}
			for i, w := range c.want {
				if b, _ := p.Pick(Request{}, bs, c.ok); b != bs[w] {
					t.Fatalf("call %d picked %v, want backend %d", i, b, w)
				}
			}
		})
	}
	if b, _ := (&RoundRobin{}).Pick(Request{}, bs, only()); b != nil {
		t.Fatal("picked with nothing acceptable")
	}
	if b, _ := (&RoundRobin{}).Pick(Request{}, nil, all); b != nil {
		t.Fatal("picked from no candidates")
	}
}
