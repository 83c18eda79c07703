package checker

import (
	"sort"

	"github.com/locksuite/locksuite/harness/history"
)

func sortByStart(s []history.Section) {
	sort.Slice(s, func(i, j int) bool { return s[i].Start < s[j].Start })
}
