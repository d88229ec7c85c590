package load

import (
	"fmt"
	"strconv"
	"strings"
)

// Dist is a length distribution: a fixed value (Min == Max) or uniform over [Min, Max].
type Dist struct {
	Min, Max int
}

// ParseDist reads "128" (fixed) or "64-512" (uniform, both ends included).
func ParseDist(s string) (Dist, error) {
	s = strings.TrimSpace(s)
	lo, hi, isRange := strings.Cut(s, "-")
	a, err := strconv.Atoi(strings.TrimSpace(lo))
	if err != nil || a < 0 {
		return Dist{}, fmt.Errorf("length %q: want N or A-B with non-negative integers", s)
	}
	if !isRange {
		return Dist{Min: a, Max: a}, nil
	}
	b, err := strconv.Atoi(strings.TrimSpace(hi))
	if err != nil || b < a {
		return Dist{}, fmt.Errorf("length %q: want A-B with 0 <= A <= B", s)
	}
	return Dist{Min: a, Max: b}, nil
}

// String renders the distribution the way ParseDist reads it.
func (d Dist) String() string {
	if d.Min == d.Max {
		return strconv.Itoa(d.Min)
	}
	return strconv.Itoa(d.Min) + "-" + strconv.Itoa(d.Max)
}

// MarshalText lets the distribution appear as "64-512" in JSON.
func (d Dist) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText is the inverse of MarshalText.
func (d *Dist) UnmarshalText(b []byte) error {
	v, err := ParseDist(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// pick maps a uniformly random 64-bit value onto the distribution.
func (d Dist) pick(r uint64) int {
	if d.Max <= d.Min {
		return d.Min
	}
	return d.Min + int(r%uint64(d.Max-d.Min+1))
}

// splitmix64 turns (seed, request index) into an independent random value, so request i
// has the same lengths against every target no matter which worker sends it.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
