package load

import "testing"

func TestParseDist(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Dist
		bad  bool
	}{
		{in: "128", want: Dist{128, 128}},
		{in: " 64-512 ", want: Dist{64, 512}},
		{in: "0", want: Dist{0, 0}},
		{in: "7-7", want: Dist{7, 7}},
		{in: "512-64", bad: true},
		{in: "-5", bad: true},
		{in: "abc", bad: true},
		{in: "1-", bad: true},
		{in: "", bad: true},
	} {
		got, err := ParseDist(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("ParseDist(%q) = %v, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseDist(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if back, _ := ParseDist(got.String()); back != got {
			t.Errorf("String() of %v does not parse back: %v", got, back)
		}
	}
}

func TestDistPickStaysInRange(t *testing.T) {
	d := Dist{64, 70}
	seen := map[int]bool{}
	for i := range uint64(2000) {
		v := d.pick(splitmix64(i))
		if v < 64 || v > 70 {
			t.Fatalf("pick = %d, outside %v", v, d)
		}
		seen[v] = true
	}
	if len(seen) != 7 {
		t.Errorf("saw %d distinct lengths, want all 7", len(seen))
	}
}
