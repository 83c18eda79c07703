package local

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/locksuite/locksuite/fencing"
	"github.com/locksuite/locksuite/internal/redact"
)

// stores are the services that can hold the counter store, in order of
// preference: Start opens the first one among the services it provides;
// the last one is always available (etcd's server is embedded).
var stores = []*service{postgresService, etcdService}

// Stores are the counter stores WithStore takes, in order of preference
// (see Start).
var Stores = storeNames()

func storeNames() []string {
	var out []string
	for _, s := range stores {
		out = append(out, s.name)
	}
	return out
}

// counterStore is the counter store open on a service: new makes the
// fencing.Store of one configuration, close closes the connection.
type counterStore struct {
	new   func(ctx context.Context, name string, fenced bool) (fencing.Store, error)
	close func()
}

// chooseStore returns the services to try for the counter store, in
// order: the one asked for (WithStore), or those of stores that want
// names, then the always-available last one. It checks asked.
func chooseStore(asked string, want map[string]bool) ([]*service, error) {
	if asked != "" {
		i := slices.IndexFunc(stores, func(s *service) bool { return s.name == asked })
		if i < 0 {
			return nil, fmt.Errorf("local: unknown store %q: choose %s", asked, strings.Join(Stores, " or "))
		}
		return stores[i : i+1], nil
	}
	var out []*service
	for _, s := range stores[:len(stores)-1] {
		if want[s.name] {
			out = append(out, s)
		}
	}
	return append(out, stores[len(stores)-1]), nil
}

// openStore provides the services of candidates in order until one is
// available, and opens the counter store there; with asked set, only that
// one. The error names the store and why it could not be had.
func (e *Env) openStore(ctx context.Context, candidates []*service, asked string) error {
	for _, s := range candidates {
		if e.endpoint[s.name] == "" && e.Unavailable[s.name] == nil {
			e.add(s, s.provide(ctx, e.crash, e.given[s.name]))
		}
		switch {
		case e.endpoint[s.name] != "":
		case s == stores[len(stores)-1]:
			return fmt.Errorf("local: no counter store: %v", e.Unavailable[s.name])
		case asked != "":
			return fmt.Errorf("local: counter store: %v", e.Unavailable[s.name])
		default:
			continue
		}
		c := e.conn(s.name)
		st, err := s.store(ctx, c)
		if err != nil {
			return fmt.Errorf("local: counter store on %s: %w", s.name, redact.Error(err, c.secrets...))
		}
		e.store, e.Store = st, s.name
		return nil
	}
	return fmt.Errorf("local: no counter store") // not reached: candidates ends with the last store
}
