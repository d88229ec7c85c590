package load

import (
	"math/bits"
	"time"
)

// histogram records inter-token gaps, of which a long streaming run has millions: too many
// to keep one by one. It is log-linear like HdrHistogram: values below 128 µs are exact,
// larger ones fall into 128 sub-buckets per power of two, so a percentile read from it is
// within 1/128 (< 0.8%) of the true sample. Rows are allocated on first use, so a worker
// whose gaps span a few powers of two holds a few KB.
type histogram struct {
	rows  [][]uint64 // rows[e]: sub-buckets for values in [128<<(e-1), 128<<e) µs; rows[0] exact
	count uint64
	sum   time.Duration
	max   time.Duration
}

const subBuckets = 128

func (h *histogram) record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.count++
	h.sum += d
	h.max = max(h.max, d)
	us := uint64(d / time.Microsecond)
	row, sub := 0, us
	if us >= subBuckets {
		shift := bits.Len64(us) - 8 // keep the top 8 bits: 128..255
		row, sub = shift+1, (us>>shift)-subBuckets
	}
	for len(h.rows) <= row {
		h.rows = append(h.rows, nil)
	}
	if h.rows[row] == nil {
		h.rows[row] = make([]uint64, subBuckets)
	}
	h.rows[row][sub]++
}

// merge adds o's samples into h.
func (h *histogram) merge(o *histogram) {
	h.count += o.count
	h.sum += o.sum
	h.max = max(h.max, o.max)
	for len(h.rows) < len(o.rows) {
		h.rows = append(h.rows, nil)
	}
	for r, row := range o.rows {
		if row == nil {
			continue
		}
		if h.rows[r] == nil {
			h.rows[r] = make([]uint64, subBuckets)
		}
		for i, c := range row {
			h.rows[r][i] += c
		}
	}
}

// quantile returns the middle of the bucket holding the nearest-rank permille sample.
func (h *histogram) quantile(permille int) time.Duration {
	if h.count == 0 {
		return 0
	}
	rank := max(1, (uint64(permille)*h.count+999)/1000)
	var seen uint64
	for r, row := range h.rows {
		for i, c := range row {
			seen += c
			if seen < rank {
				continue
			}
			if r == 0 {
				return time.Duration(i) * time.Microsecond
			}
			shift := r - 1
			lo := uint64(i+subBuckets) << shift
			mid := lo + (uint64(1)<<shift)/2
			return min(time.Duration(mid)*time.Microsecond, h.max)
		}
	}
	return h.max
}

func (h *histogram) percentiles() Percentiles {
	if h.count == 0 {
		return Percentiles{}
	}
	return Percentiles{
		Count: int(h.count),
		Mean:  ms(h.sum / time.Duration(h.count)),
		P50:   ms(h.quantile(500)),
		P90:   ms(h.quantile(900)),
		P99:   ms(h.quantile(990)),
		P999:  ms(h.quantile(999)),
		Max:   ms(h.max),
	}
}
