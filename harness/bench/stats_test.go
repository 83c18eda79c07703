package bench

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// TestPercentiles: on known samples, each percentile is the nearest-rank
// sample, exactly below 256 ns and within 1/128 above (never below), and
// the largest is exact.
func TestPercentiles(t *testing.T) {
	var small []time.Duration
	for i := 1; i <= 100; i++ {
		small = append(small, time.Duration(i))
	}
	rand.Shuffle(len(small), func(i, j int) { small[i], small[j] = small[j], small[i] })
	if got, want := Percentiles(small), (Latency{P50: 50, P90: 90, P99: 99, Max: 100, N: 100}); got != want {
		t.Errorf("Percentiles(1..100 ns) = %+v, want %+v", got, want)
	}
	if got, want := Percentiles([]time.Duration{7}), (Latency{P50: 7, P90: 7, P99: 7, Max: 7, N: 1}); got != want {
		t.Errorf("Percentiles(7 ns) = %+v, want %+v", got, want)
	}
	if got := Percentiles(nil); got != (Latency{}) {
		t.Errorf("Percentiles(nil) = %+v, want zero", got)
	}

	var large []time.Duration
	for i := 1; i <= 1000; i++ {
		large = append(large, time.Duration(i)*time.Millisecond+time.Duration(i)*1234)
	}
	got := Percentiles(large)
	for _, c := range []struct {
		name      string
		got, want time.Duration
	}{{"p50", got.P50, large[499]}, {"p90", got.P90, large[899]}, {"p99", got.P99, large[989]}} {
		if c.got < c.want || c.got > c.want+c.want/128 {
			t.Errorf("%s = %v, want within [%v, %v]", c.name, c.got, c.want, c.want+c.want/128)
		}
	}
	if got.Max != large[999] || got.N != 1000 {
		t.Errorf("max %v, n %d: want %v, 1000", got.Max, got.N, large[999])
	}
}

// TestBuckets: every duration's bucket holds it, is at most 1/128 of it
// wide, and buckets follow the durations' order.
func TestBuckets(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	prev := -1
	for v := time.Duration(0); v < 5000; v++ {
		i := bucketOf(v)
		if i < prev || upperOf(i) < v {
			t.Fatalf("bucketOf(%d) = %d (upper %d) after %d", v, i, upperOf(i), prev)
		}
		prev = i
	}
	for range 100000 {
		v := time.Duration(r.Int64N(int64(time.Hour)))
		u := upperOf(bucketOf(v))
		if u < v || (v >= exactBelow && u-v > v/128) || (v < exactBelow && u != v) {
			t.Fatalf("%d falls in a bucket up to %d", v, u)
		}
		if w := v + 1 + time.Duration(r.Int64N(1000)); bucketOf(w) < bucketOf(v) {
			t.Fatalf("bucketOf(%d) < bucketOf(%d)", w, v)
		}
	}
}

// TestHistogramMerge: merging two histograms is counting both sets.
func TestHistogramMerge(t *testing.T) {
	var a, b, both Histogram
	for i := range 500 {
		d := time.Duration(i*i) * time.Microsecond
		if i%3 == 0 {
			a.Add(d)
		} else {
			b.Add(d)
		}
		both.Add(d)
	}
	a.Merge(&b)
	if a.Latency() != both.Latency() {
		t.Errorf("merged %+v, want %+v", a.Latency(), both.Latency())
	}
	var neg Histogram
	neg.Add(-time.Second)
	if neg.Max() != 0 || neg.N() != 1 {
		t.Errorf("a negative duration counts as 0: max %v, n %d", neg.Max(), neg.N())
	}
}

// TestFairness: Jain's index and starvation of known shares, and what the
// fairest spread of the same grants gives.
func TestFairness(t *testing.T) {
	for _, c := range []struct {
		grants                 []int
		jain, fairest          float64
		starved, fewestStarved int
	}{
		{[]int{5, 5, 5, 5}, 1, 1, 0, 0},
		{[]int{12, 0, 0, 0}, 0.25, 1, 3, 0},
		{[]int{9, 0, 0}, 1.0 / 3, 1, 2, 0},
		{[]int{3, 0, 0, 0}, 0.25, 0.75, 3, 1}, // fairest: 1,1,1,0
		{[]int{2, 1}, 0.9, 0.9, 0, 0},
		{[]int{0, 0}, 0, 0, 2, 2},
		{nil, 0, 0, 0, 0},
	} {
		f := FairnessOf(c.grants)
		if math.Abs(f.Jain-c.jain) > 1e-12 || math.Abs(f.FairestJain-c.fairest) > 1e-12 || f.Starved != c.starved || f.FewestStarved != c.fewestStarved {
			t.Errorf("FairnessOf(%v) = %+v, want Jain %v (fairest %v), starved %d (fewest %d)", c.grants, f, c.jain, c.fairest, c.starved, c.fewestStarved)
		}
	}
}

// TestStatOf: the least, the median (the mean of the middle two for an
// even count) and the greatest, whatever the order.
func TestStatOf(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want Stat
	}{
		{[]float64{3, 1, 2}, Stat{1, 2, 3}},
		{[]float64{4, 1, 3, 2}, Stat{1, 2.5, 4}},
		{[]float64{7}, Stat{7, 7, 7}},
		{nil, Stat{}},
	} {
		if got := StatOf(c.in); got != c.want {
			t.Errorf("StatOf(%v) = %+v, want %+v", c.in, got, c.want)
		}
	}
}
