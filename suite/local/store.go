package local

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	etcdentry "github.com/locksuite/locksuite/harness/services/etcd/entry"
	postgresentry "github.com/locksuite/locksuite/harness/services/postgres/entry"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/locksuite/locksuite/harness/servers"
	"github.com/locksuite/locksuite/harness/services"
	"github.com/locksuite/locksuite/internal/redact"
)

// StoreEnv names the counter store's server: a postgres:// URL, or an
// etcd endpoint (host:port or http://host:port). Set, Start opens the
// store there and nowhere else. Unset, Start starts one when it would
// otherwise share a server under test (see Start), and names it in
// Environ, so that worker processes write to the same store.
const StoreEnv = "LOCKSUITE_STORE_URL"

// stores are the services that can hold the counter store, in order of
// preference: Start opens the first one among the services it provides;
// the last one is always available (etcd's server is embedded).
var stores = []*services.Service{postgresentry.Service, etcdentry.Service}

// Stores are the counter stores WithStore takes, in order of preference
// (see Start).
var Stores = storeNames()

func storeNames() []string {
	var out []string
	for _, s := range stores {
		out = append(out, s.Name)
	}
	return out
}

// chooseStore returns the services to try for the counter store, in
// order: the one asked for (WithStore), or those of stores that want
// names, then the always-available last one. It checks asked.
func chooseStore(asked string, want map[string]bool) ([]*services.Service, error) {
	if asked != "" {
		i := slices.IndexFunc(stores, func(s *services.Service) bool { return s.Name == asked })
		if i < 0 {
			return nil, fmt.Errorf("local: unknown store %q: choose %s", asked, strings.Join(Stores, " or "))
		}
		return stores[i : i+1], nil
	}
	var out []*services.Service
	for _, s := range stores[:len(stores)-1] {
		if want[s.Name] {
			out = append(out, s)
		}
	}
	return append(out, stores[len(stores)-1]), nil
}

// ownStoreOf is s, the counter store's first choice, if the store is to
// have a server of its own: s is under test (want) and its server is one
// Start starts (neither the environment's nor WithServer's). Its faults
// then fault no run's store, and a power loss there loses no count.
func ownStoreOf(s *services.Service, want map[string]bool, given map[string]servers.Server) *services.Service {
	if !want[s.Name] || given[s.Name] != nil {
		return nil
	}
	if c, err := named(s); c != nil || err != nil {
		return nil
	}
	return s
}

// openOwnStore opens the counter store on made, the server Start started
// for it alone (ownStoreOf); on failure it stops the server, and Start
// falls back to a shared one.
func (e *Env) openOwnStore(ctx context.Context, s *services.Service, made provided) error {
	if made.err != nil {
		return made.err
	}
	c := made.mc
	if c == nil {
		c = &services.Conn{Endpoint: made.srv.Endpoint()}
	}
	st, err := s.Store(ctx, c)
	if err != nil {
		_ = made.srv.Stop()
		return err
	}
	e.store, e.Store, e.storeSrv, e.storeAt = st, s.Name, made.srv, made.srv.Endpoint()
	return nil
}

// openStoreAt opens the counter store on the server StoreEnv names (at):
// Postgres for a postgres:// URL, else etcd; asked, if set, must be that
// kind. The server must answer within 5 s.
func (e *Env) openStoreAt(ctx context.Context, at, asked string) error {
	s, c := etcdentry.Service, &services.Conn{Endpoint: at}
	if u, err := url.Parse(at); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		s = postgresentry.Service
		if pc, err := pgconn.ParseConfig(at); err == nil {
			c.Secrets = append(c.Secrets, pc.Password)
		}
	} else if err == nil && u.User != nil {
		p, _ := u.User.Password()
		c.Secrets = append(c.Secrets, p)
	}
	if asked != "" && asked != s.Name {
		return fmt.Errorf("local: %s names a %s server, but the counter store asked for is %s: unset %s, or ask for %s", StoreEnv, s.Name, asked, StoreEnv, s.Name)
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.Probe(pctx, c); err != nil {
		return fmt.Errorf("local: counter store at %s: %w: check the %s server it names, or unset it", StoreEnv, redact.Error(err, c.Secrets...), s.Title)
	}
	st, err := s.Store(ctx, c)
	if err != nil {
		return fmt.Errorf("local: counter store at %s: %w", StoreEnv, redact.Error(err, c.Secrets...))
	}
	e.store, e.Store, e.storeAt = st, s.Name, at
	return nil
}

// openStore provides the services of candidates in order until one is
// available, and opens the counter store there; with asked set, only that
// one. The error names the store and why it could not be had.
func (e *Env) openStore(ctx context.Context, candidates []*services.Service, asked string) error {
	for _, s := range candidates {
		if e.endpoint[s.Name] == "" && e.Unavailable[s.Name] == nil {
			e.add(s, provide(ctx, s, e.crash, e.given[s.Name]))
		}
		switch {
		case e.endpoint[s.Name] != "":
		case s == stores[len(stores)-1]:
			return fmt.Errorf("local: no counter store: %v", e.Unavailable[s.Name])
		case asked != "":
			return fmt.Errorf("local: counter store: %v", e.Unavailable[s.Name])
		default:
			continue
		}
		c := e.conn(s.Name)
		st, err := s.Store(ctx, c)
		if err != nil {
			return fmt.Errorf("local: counter store on %s: %w", s.Name, redact.Error(err, c.Secrets...))
		}
		e.store, e.Store = st, s.Name
		return nil
	}
	return fmt.Errorf("local: no counter store") // not reached: candidates ends with the last store
}
