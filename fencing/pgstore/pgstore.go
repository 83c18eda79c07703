// Package pgstore is a fencing.Store in a Postgres table: one row (name,
// value, fence) per counter.
package pgstore

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/locksuite/locksuite/fencing"
)

// DefaultTable is the table in which Postgres counters are kept.
const DefaultTable = "locksuite_counter"

var tableName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Store is a counter row (name, value, fence) in a Postgres table.
type Store struct {
	pool     *pgxpool.Pool
	table    string
	name     string
	fenced   bool
	rejected atomic.Uint64
}

var _ fencing.Store = (*Store)(nil)

// TableMark is the comment New puts on a counter table it creates.
// A table of that name without it is someone else's, and is never used.
const TableMark = "locksuite counter table: rows are counters named by locksuite runs"

// New returns the Store of counter name in table (DefaultTable if
// empty), creating the counter at 0 with fence 0 if it does not exist yet,
// so that several processes of one run can open the same counter. Name
// counters per run.
//
// A missing table is created and marked with COMMENT ON TABLE (TableMark),
// in one transaction. An existing table is used only if it carries the mark:
// on a shared server a table of the same name made by someone else is
// refused with an error naming it and the fix, and left untouched.
func New(ctx context.Context, pool *pgxpool.Pool, table, name string, fenced bool) (*Store, error) {
	if table == "" {
		table = DefaultTable
	}
	if !tableName.MatchString(table) {
		return nil, fmt.Errorf("pgstore: table name %q: use lower-case letters, digits and _", table)
	}
	s := &Store{pool: pool, table: pgx.Identifier{table}.Sanitize(), name: name, fenced: fenced}
	if err := s.ensureTable(ctx, table); err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, `INSERT INTO `+s.table+` (name, value, fence) VALUES ($1, 0, 0) ON CONFLICT (name) DO NOTHING`, name); err != nil {
		return nil, fmt.Errorf("pgstore: create counter %q in %s: %w", name, table, err)
	}
	return s, nil
}

// ensureTable creates and marks the table, or checks the mark of an
// existing one. Concurrent creators (the workers of one run) race safely:
// the loser of the CREATE finds the winner's marked table.
func (s *Store) ensureTable(ctx context.Context, table string) error {
	check := func(q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) (exists bool, err error) {
		var comment *string
		err = q.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL, obj_description(to_regclass($1), 'pg_class')`, s.table).Scan(&exists, &comment)
		if err != nil {
			return false, fmt.Errorf("pgstore: look up table %s: %w", table, err)
		}
		if exists && (comment == nil || *comment != TableMark) {
			return true, fmt.Errorf("pgstore: table %s exists but was not created by locksuite (its comment is not %q): it may hold someone else's data, so it is not used; fix: pass another table name to pgstore.New, or, if it is an old locksuite table, drop it", table, TableMark)
		}
		return exists, nil
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgstore: create table %s: %w", table, err)
	}
	defer tx.Rollback(ctx)
	// Creators take turns (a transaction advisory lock on the table's
	// name): in one statement to_regclass can see a table whose creator
	// committed after the statement's snapshot, which obj_description does
	// not see, so a check beside a commit saw the table without its mark.
	// After the lock, the check's snapshot has the winner's whole commit.
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, "locksuite pgstore "+s.table); err != nil {
		return fmt.Errorf("pgstore: create table %s: %w", table, err)
	}
	exists, err := check(tx) // read committed: a snapshot taken after the lock
	if err != nil || exists {
		return err
	}
	_, err = tx.Exec(ctx, `CREATE TABLE `+s.table+` (
		name  text PRIMARY KEY,
		value bigint NOT NULL,
		fence bigint NOT NULL)`)
	if err == nil {
		_, err = tx.Exec(ctx, `COMMENT ON TABLE `+s.table+` IS '`+TableMark+`'`)
	}
	if err == nil {
		err = tx.Commit(ctx)
	}
	if err != nil {
		tx.Rollback(ctx)
		if exists, cerr := check(s.pool); cerr != nil || exists {
			return cerr // another process of this run made it meanwhile, or someone else did
		}
		return fmt.Errorf("pgstore: create table %s: %w", table, err)
	}
	return nil
}

func (s *Store) Fenced() bool     { return s.fenced }
func (s *Store) Rejected() uint64 { return s.rejected.Load() }

func (s *Store) Value(ctx context.Context) (int64, error) {
	var v int64
	err := s.pool.QueryRow(ctx, `SELECT value FROM `+s.table+` WHERE name = $1`, s.name).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("pgstore: counter %q is gone from %s", s.name, s.table)
	}
	return v, err
}

func (s *Store) Read(ctx context.Context, fence uint64) (int64, error) {
	if !s.fenced {
		return s.Value(ctx)
	}
	var v int64
	err := s.pool.QueryRow(ctx, `UPDATE `+s.table+` SET fence = $2 WHERE name = $1 AND fence <= $2 RETURNING value`, s.name, int64(fence)).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		s.rejected.Add(1)
		return 0, fmt.Errorf("%w (read with fence %d)", fencing.ErrStale, fence)
	}
	if err != nil {
		return 0, fmt.Errorf("pgstore: read counter %q: %w", s.name, err)
	}
	return v, nil
}

func (s *Store) Write(ctx context.Context, value int64, fence uint64) error {
	q := `UPDATE ` + s.table + ` SET value = $1, fence = $2 WHERE name = $3`
	if s.fenced {
		q += ` AND fence <= $2`
	}
	tag, err := s.pool.Exec(ctx, q, value, int64(fence), s.name)
	if err != nil {
		return fmt.Errorf("pgstore: write counter %q: %w", s.name, err)
	}
	if tag.RowsAffected() == 0 {
		if s.fenced {
			s.rejected.Add(1)
			return fmt.Errorf("%w (write with fence %d)", fencing.ErrStale, fence)
		}
		return fmt.Errorf("pgstore: counter %q is gone from %s", s.name, s.table)
	}
	return nil
}

// Close deletes this counter's row (and nothing else).
func (s *Store) Close(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM `+s.table+` WHERE name = $1`, s.name)
	return err
}
