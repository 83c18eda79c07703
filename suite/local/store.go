package local

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/locksuite/locksuite/fencing"
	"github.com/locksuite/locksuite/harness/servers"
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

// ownStoreOf is s, the counter store's first choice, if the store is to
// have a server of its own: s is under test (want) and its server is one
// Start starts (neither the environment's nor WithServer's). Its faults
// then fault no run's store, and a power loss there loses no count.
func ownStoreOf(s *service, want map[string]bool, given map[string]servers.Server) *service {
	if !want[s.name] || given[s.name] != nil {
		return nil
	}
	if c, err := s.named(); c != nil || err != nil {
		return nil
	}
	return s
}

// openOwnStore opens the counter store on made, the server Start started
// for it alone (ownStoreOf); on failure it stops the server, and Start
// falls back to a shared one.
func (e *Env) openOwnStore(ctx context.Context, s *service, made provided) error {
	if made.err != nil {
		return made.err
	}
	c := made.mc
	if c == nil {
		c = &conn{endpoint: made.srv.Endpoint()}
	}
	st, err := s.store(ctx, c)
	if err != nil {
		_ = made.srv.Stop()
		return err
	}
	e.store, e.Store, e.storeSrv, e.storeAt = st, s.name, made.srv, made.srv.Endpoint()
	return nil
}

// openStoreAt opens the counter store on the server StoreEnv names (at):
// Postgres for a postgres:// URL, else etcd; asked, if set, must be that
// kind. The server must answer within 5 s.
func (e *Env) openStoreAt(ctx context.Context, at, asked string) error {
	s, c := etcdService, &conn{endpoint: at}
	if u, err := url.Parse(at); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		s = postgresService
		if pc, err := pgconn.ParseConfig(at); err == nil {
			c.secrets = append(c.secrets, pc.Password)
		}
	} else if err == nil && u.User != nil {
		p, _ := u.User.Password()
		c.secrets = append(c.secrets, p)
	}
	if asked != "" && asked != s.name {
		return fmt.Errorf("local: %s names a %s server, but the counter store asked for is %s: unset %s, or ask for %s", StoreEnv, s.name, asked, StoreEnv, s.name)
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.probe(pctx, c); err != nil {
		return fmt.Errorf("local: counter store at %s: %w: check the %s server it names, or unset it", StoreEnv, redact.Error(err, c.secrets...), s.title)
	}
	st, err := s.store(ctx, c)
	if err != nil {
		return fmt.Errorf("local: counter store at %s: %w", StoreEnv, redact.Error(err, c.secrets...))
	}
	e.store, e.Store, e.storeAt = st, s.name, at
	return nil
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
