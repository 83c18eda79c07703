package local

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/locksuite/locksuite/backends"
	"github.com/locksuite/locksuite/harness/services"
	"github.com/locksuite/locksuite/suite"
)

// TestTable: every backend has a unique name, a Locker and a service that
// can be started, named by a variable, described and asked its version;
// Names, Libraries, Clusters, WhenNamed, Variants, Poolers and Languages list each backend once; a
// service's variables are its own; a service with an adapter has its own
// folder in harness/services, named after it.
func TestTable(t *testing.T) {
	seen := map[string]bool{}
	for _, b := range table.backends {
		if seen[b.Name] {
			t.Errorf("backend %q twice", b.Name)
		}
		seen[b.Name] = true
		if b.NewLocker == nil || b.On == nil || b.On.Start == nil || len(b.On.Vars) == 0 || b.On.Lease <= 0 || b.On.Pause <= 0 || b.On.Duration <= 0 {
			t.Errorf("backend %q lacks a Locker, a service, a start, a variable or its defaults: %+v", b.Name, b.On)
		}
		if len(b.Modules) == 0 && b.Worker == "" && b.OwnClient == "" { // a worker's library is its runtime's
			t.Errorf("backend %q names no Go module of its client (modules)", b.Name)
		}
	}
	for _, s := range allServices() {
		if s.Title == "" || s.Server == "" || s.Version == nil {
			t.Errorf("service %q lacks its title, its server or its version", s.Name)
		}
		if _, ok := serviceOf(s.Name); !ok {
			t.Errorf("service %q is not found by its name", s.Name)
		}
	}
	for _, n := range Names {
		s, _ := serviceOf(n)
		if _, err := os.Stat(filepath.Join("..", "..", "harness", "services", s.Name, "entry")); err != nil {
			t.Errorf("service %q (of %s) has no folder of its own in harness/services: %v", s.Name, n, err)
		}
	}
	all := slices.Concat(Names, Libraries, Clusters, WhenNamed, Variants, Poolers, Languages)
	slices.Sort(all)
	if len(all) != len(seen) || len(slices.Compact(all)) != len(seen) {
		t.Errorf("Names, Libraries, Clusters, WhenNamed, Variants, Poolers and Languages (%v) do not list the %d backends once each", all, len(seen))
	}
	vars := map[string]string{}
	for _, s := range allServices() {
		for _, v := range s.Vars {
			if o, ok := vars[v]; ok {
				t.Errorf("%s is a variable of both %s and %s", v, o, s.Name)
			}
			vars[v] = s.Name
		}
	}
	for _, s := range allServices() {
		for _, v := range s.Shared {
			if o, ok := vars[v]; !ok || o == s.Name {
				t.Errorf("%s, shared by %s, is not another service's variable", v, s.Name)
			}
		}
	}
}

// TestConfigFor: an unknown or unavailable service is an error that names
// it; an available one gives the service's defaults and the caller's
// Locker.
func TestConfigFor(t *testing.T) {
	e := &Env{endpoint: map[string]string{"redis": "127.0.0.1:1"}, conns: map[string]*services.Conn{}, Unavailable: map[string]error{}, started: map[string]suite.Servers{}}
	ours := func(context.Context, suite.Client) (backends.Locker, error) { return nil, nil }
	if _, err := e.ConfigFor("mine", "hazelcast", false, ours); err == nil || !strings.Contains(err.Error(), `"hazelcast"`) {
		t.Errorf("unknown service: %v", err)
	}
	if _, err := e.ConfigFor("mine", "consul", false, ours); err == nil || !strings.Contains(err.Error(), "consul is not available") {
		t.Errorf("service not started: %v", err)
	}
	cfg, err := e.ConfigFor("mine", "redsync", true, ours)
	if err != nil || cfg.Name != "mine" || !cfg.Fenced || cfg.Lease != Leases["redis"] || cfg.NewLocker == nil || cfg.NewStore == nil {
		t.Errorf("redis (named by its library): %+v, %v", cfg, err)
	}
}
