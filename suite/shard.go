package suite

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
)

// Shard is one share of a suite run split over several machines or jobs
// (a CI job matrix, a Kubernetes Indexed Job): the runs of shard i of n,
// merged (locksuite merge), are the runs of the whole. Its zero value is
// the whole run.
//
// A run belongs to a shard by a hash of what names it (the Config's Name,
// its fencing mode, the scenario and the run's number among Repeat), not by
// its place in a list, so the split does not depend on the order of the
// Configs or on which backends a machine can run: every shard of the same
// plan agrees on it.
type Shard struct {
	// Index is this shard's number, from 1 to Total.
	Index int
	// Total is how many shards the run is split into; 0 or 1: none.
	Total int
	_     struct{}
}

// ParseShard parses "i/n" (1 <= i <= n), as the CLI's --shard takes it.
func ParseShard(s string) (Shard, error) {
	a, b, ok := strings.Cut(s, "/")
	i, erri := strconv.Atoi(a)
	n, errn := strconv.Atoi(b)
	if !ok || erri != nil || errn != nil || n < 1 || i < 1 || i > n {
		return Shard{}, fmt.Errorf("shard %q: write INDEX/TOTAL with 1 <= INDEX <= TOTAL, e.g. 1/4", s)
	}
	return Shard{Index: i, Total: n}, nil
}

// String is "i/n", or "" for the whole run.
func (s Shard) String() string {
	if s.Total <= 1 {
		return ""
	}
	return fmt.Sprintf("%d/%d", s.Index, s.Total)
}

// Has reports whether the run named by backend, fenced, scenario and run
// (its number among Options.Repeat, from 0) belongs to s.
func (s Shard) Has(backend string, fenced bool, scenario string, run int) bool {
	if s.Total <= 1 {
		return true
	}
	h := fnv.New32a()
	fmt.Fprintf(h, "%s\x00%v\x00%s\x00%d", backend, fenced, scenario, run)
	return int(h.Sum32()%uint32(s.Total)) == s.Index-1
}
