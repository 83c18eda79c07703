package local

import (
	"strings"
	"testing"
)

// TestChooseStore: the counter store is the first of stores whose service
// Start provides, else the last (embedded); WithStore's choice is the only
// one tried; an unknown one is refused with the choices.
func TestChooseStore(t *testing.T) {
	for _, tc := range []struct {
		asked string
		want  []string // services Start provides
		try   string
	}{
		{"", []string{"redis"}, "etcd"},
		{"", []string{"postgres", "redis"}, "postgres,etcd"},
		{"", []string{"pg-xact"}, "etcd"}, // want holds services, not backends: Start maps them
		{"etcd", []string{"postgres"}, "etcd"},
		{"postgres", []string{"redis"}, "postgres"},
	} {
		want := map[string]bool{}
		for _, n := range tc.want {
			want[n] = true
		}
		got, err := chooseStore(tc.asked, want)
		var names []string
		for _, s := range got {
			names = append(names, s.name)
		}
		if err != nil || strings.Join(names, ",") != tc.try {
			t.Errorf("store %q with %v: tries %v, %v; want %s", tc.asked, tc.want, names, err, tc.try)
		}
	}
	if _, err := chooseStore("redis", nil); err == nil || !strings.Contains(err.Error(), `unknown store "redis": choose postgres or etcd`) {
		t.Errorf("store redis: %v", err)
	}
	if Stores[len(Stores)-1] != "etcd" {
		t.Errorf("Stores %v: the last, always available, must be the embedded etcd", Stores)
	}
}
