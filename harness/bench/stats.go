package bench

import (
	"math"
	"math/bits"
	"slices"
	"time"
)

// Histogram counts durations in buckets: one per nanosecond below 256 ns,
// then 128 per power of two, so that a bucket is never wider than 1/128 of
// its lower bound. A percentile read from it is the largest duration its
// bucket holds, never below the sample's and at most 0.8 % above it (and
// never above Max); below 256 ns it is exact. It keeps the count and the
// exact largest duration. The zero Histogram is empty and ready to use; it
// is not safe for concurrent use.
type Histogram struct {
	counts []uint64
	n      int64
	max    time.Duration
}

const (
	exactBelow = 256 // durations below this many ns have a bucket each
	perOctave  = 128 // buckets per power of two above
)

// bucketOf is the index of d's bucket (d >= 0).
func bucketOf(d time.Duration) int {
	v := uint64(d)
	if v < exactBelow {
		return int(v)
	}
	k := bits.Len64(v) - 1 // v in [2^k, 2^(k+1)), k >= 8
	shift := k - 7         // v >> shift in [128, 256)
	top := v >> shift
	return exactBelow + (k-8)*perOctave + int(top-perOctave)
}

// upperOf is the largest duration bucket i holds.
func upperOf(i int) time.Duration {
	if i < exactBelow {
		return time.Duration(i)
	}
	j := i - exactBelow
	k := 8 + j/perOctave
	top := uint64(perOctave + j%perOctave)
	shift := k - 7
	return time.Duration((top+1)<<shift - 1)
}

// Add counts d; a negative d counts as 0.
func (h *Histogram) Add(d time.Duration) {
	d = max(d, 0)
	i := bucketOf(d)
	if i >= len(h.counts) {
		h.counts = append(h.counts, make([]uint64, i+1-len(h.counts))...)
	}
	h.counts[i]++
	h.n++
	h.max = max(h.max, d)
}

// Merge adds o's counts to h.
func (h *Histogram) Merge(o *Histogram) {
	if len(o.counts) > len(h.counts) {
		h.counts = append(h.counts, make([]uint64, len(o.counts)-len(h.counts))...)
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// N is the number of durations counted.
func (h *Histogram) N() int64 { return h.n }

// Max is the largest duration counted, exactly; 0 when empty.
func (h *Histogram) Max() time.Duration { return h.max }

// Quantile is the nearest-rank q-quantile (0 < q <= 1): the smallest
// counted duration d such that at least q·N of the durations are <= d, as
// its bucket's largest duration (see Histogram), at most Max. It is 0 when
// the Histogram is empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := max(int64(math.Ceil(q*float64(h.n))), 1)
	var seen int64
	for i, c := range h.counts {
		if seen += int64(c); seen >= rank {
			return min(upperOf(i), h.max)
		}
	}
	return h.max
}

// Latency is a distribution of durations by its percentiles.
type Latency struct {
	P50, P90, P99, Max time.Duration
	N                  int64 // how many durations
}

// Latency returns h's 50th, 90th and 99th percentiles (Quantile) and Max.
func (h *Histogram) Latency() Latency {
	return Latency{P50: h.Quantile(0.5), P90: h.Quantile(0.9), P99: h.Quantile(0.99), Max: h.max, N: h.n}
}

// Percentiles returns the Latency of samples, as a Histogram reads it.
func Percentiles(samples []time.Duration) Latency {
	var h Histogram
	for _, s := range samples {
		h.Add(s)
	}
	return h.Latency()
}

// Jain is Jain's fairness index of the grants each client got:
// (Σx)² / (n·Σx²). It is 1 when every client got as many grants as every
// other, and 1/n when one client got them all. With no grants at all it
// is 0 (nothing was shared, fairly or not).
func Jain(grants []int) float64 {
	var sum, sq float64
	for _, g := range grants {
		sum += float64(g)
		sq += float64(g) * float64(g)
	}
	if sq == 0 {
		return 0
	}
	return sum * sum / (float64(len(grants)) * sq)
}

// Starved counts the clients that got no grant.
func Starved(grants []int) int {
	n := 0
	for _, g := range grants {
		if g == 0 {
			n++
		}
	}
	return n
}

// Stat is one figure over the rounds of a measurement: the least, the
// median and the greatest of the rounds' values.
type Stat struct {
	Min    float64 `json:"min"`
	Median float64 `json:"median"`
	Max    float64 `json:"max"`
}

// StatOf returns the least, median and greatest of vals; the median of an
// even number of values is the mean of the middle two. It is the zero Stat
// for no values.
func StatOf(vals []float64) Stat {
	if len(vals) == 0 {
		return Stat{}
	}
	s := slices.Clone(vals)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Stat{Min: s[0], Median: m, Max: s[len(s)-1]}
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
