package load

import (
	"math"
	"sort"
)

// zipf picks a rank among n with probability proportional to 1/rank^s (rank 1 the most
// likely) from one uniformly random 64-bit value, so that a request's pick depends on its
// own draw and not on how many picks came before it.
type zipf struct {
	cdf []float64 // cdf[k]: probability of a rank ≤ k+1; the last is exactly 1
}

func newZipf(n int, s float64) zipf {
	cdf := make([]float64, n)
	var sum float64
	for k := range n {
		sum += math.Pow(float64(k+1), -s)
		cdf[k] = sum
	}
	for k := range cdf {
		cdf[k] /= sum
	}
	cdf[n-1] = 1
	return zipf{cdf: cdf}
}

// rank maps r onto a rank in [1, n].
func (z zipf) rank(r uint64) int {
	u := float64(r>>11) * 0x1p-53 // [0, 1), every value equally likely
	return min(sort.SearchFloat64s(z.cdf, u), len(z.cdf)-1) + 1
}
