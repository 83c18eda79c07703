package report

import (
	"fmt"
	"io"
	"slices"
	"time"
)

// WriteTiming writes, as a Markdown table, where the runs' time went, per
// scenario in the order of rows (sort them first): how many runs reached a
// verdict, and the median of their setup (SetupMS), of their floor (the
// time the load planned: PlannedMS), of their load (DurationMS) and of
// their whole time (WallMS), and the median of what the whole time
// exceeds the floor by. Skipped rows and rows without a wall time (an
// earlier version's) are left out; it writes nothing if none is left.
func WriteTiming(w io.Writer, rows []Row) error {
	var order []string
	by := map[string][]Row{}
	for _, r := range rows {
		if r.Verdict == Skipped || r.WallMS == 0 {
			continue
		}
		if _, ok := by[r.Scenario]; !ok {
			order = append(order, r.Scenario)
		}
		by[r.Scenario] = append(by[r.Scenario], r)
	}
	if len(order) == 0 {
		return nil
	}
	if _, err := fmt.Fprintln(w, "| scenario | runs | setup | floor | load | whole | whole − floor |\n|---|---|---|---|---|---|---|"); err != nil {
		return err
	}
	ms := func(v int64) string {
		return (time.Duration(v) * time.Millisecond).Round(10 * time.Millisecond).String()
	}
	for _, sc := range order {
		rs := by[sc]
		med := func(f func(Row) int64) int64 {
			v := make([]int64, len(rs))
			for i, r := range rs {
				v[i] = f(r)
			}
			slices.Sort(v)
			return v[len(v)/2]
		}
		_, err := fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s | %s |\n", sc, len(rs),
			ms(med(func(r Row) int64 { return r.SetupMS })), ms(med(func(r Row) int64 { return r.PlannedMS })),
			ms(med(func(r Row) int64 { return r.DurationMS })), ms(med(func(r Row) int64 { return r.WallMS })),
			ms(med(func(r Row) int64 { return r.WallMS - r.PlannedMS })))
		if err != nil {
			return err
		}
	}
	return nil
}
