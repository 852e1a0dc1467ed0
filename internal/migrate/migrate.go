// Package migrate is the engine of skiplock's schema migrations: it reads the embedded
// SQL files (package migrations), reads which versions a schema has, and runs a step in a
// transaction that holds the schema's migration lock. The root's migrate.go is the API
// over it (Migrate, MigrateDown, GetMigrationStatus, Client.CheckSchema).
package migrate

import (
	"context"
	"fmt"
	"io/fs"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/migrations"
)

// Migration is one version: its name and its up and down SQL.
type Migration struct {
	Version  int
	Name     string
	Up, Down string
}

// lockKey is the first key of the transaction-scoped advisory lock that serializes
// migrations; the second is the hash of the schema name, so schemas migrate independently.
const lockKey = 0x736b6970 // "skip"

// Load reads the embedded SQL files in version order.
func Load() ([]Migration, error) {
	entries, err := fs.ReadDir(migrations.FS, ".")
	if err != nil {
		return nil, err
	}
	byVersion := map[int]*Migration{}
	for _, e := range entries {
		name := e.Name()
		var dir string
		switch {
		case strings.HasSuffix(name, ".up.sql"):
			dir = "up"
		case strings.HasSuffix(name, ".down.sql"):
			dir = "down"
		default:
			continue
		}
		num, rest, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v < 1 {
			return nil, fmt.Errorf("skiplock: migration file %q: name must be NNN_name.up.sql", name)
		}
		body, err := fs.ReadFile(migrations.FS, name)
		if err != nil {
			return nil, err
		}
		m := byVersion[v]
		if m == nil {
			m = &Migration{Version: v, Name: strings.TrimSuffix(strings.TrimSuffix(rest, ".up.sql"), ".down.sql")}
			byVersion[v] = m
		}
		if dir == "up" {
			m.Up = string(body)
		} else {
			m.Down = string(body)
		}
	}
	out := make([]Migration, 0, len(byVersion))
	for _, m := range byVersion {
		if m.Up == "" || m.Down == "" {
			return nil, fmt.Errorf("skiplock: migration %d needs both an up and a down file", m.Version)
		}
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// Latest is the highest version of all (ascending, as Load returns them).
func Latest(all []Migration) int { return all[len(all)-1].Version }

// Pending returns the migrations of all (ascending) up to target (0: the latest) whose
// version is not in applied.
func Pending(all []Migration, applied []int, target int) []Migration {
	if target == 0 {
		target = Latest(all)
	}
	var out []Migration
	for _, m := range all {
		if m.Version <= target && !slices.Contains(applied, m.Version) {
			out = append(out, m)
		}
	}
	return out
}

// Status is what a schema has: the versions it records, ascending, and those of all it
// lacks.
type Status struct {
	Applied, Pending []int
}

// ReadStatus reads the versions recorded in schema, with read-only statements: a role
// needs USAGE on the schema and SELECT on its schema_migrations table (nothing while
// either does not exist).
func ReadStatus(ctx context.Context, pool *pgxpool.Pool, schema string, all []Migration) (Status, error) {
	var st Status
	table := pgx.Identifier{schema, "schema_migrations"}.Sanitize()
	var exists bool
	// to_regclass is NULL for a missing schema or table, where a SELECT would fail.
	if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&exists); err != nil || !exists {
		if err == nil {
			st.Pending = pendingVersions(all, nil)
		}
		return st, err
	}
	rows, err := pool.Query(ctx, `SELECT version FROM `+table+` ORDER BY version`)
	if err != nil {
		return st, err
	}
	st.Applied, err = pgx.CollectRows(rows, pgx.RowTo[int])
	st.Pending = pendingVersions(all, st.Applied)
	return st, err
}

// pendingVersions returns the versions of all that are not in applied, ascending.
func pendingVersions(all []Migration, applied []int) []int {
	var out []int
	for _, m := range Pending(all, applied, 0) {
		out = append(out, m.Version)
	}
	return out
}

// State is what a migration step sees inside Tx.
type State struct {
	All     []Migration  // every known migration, ascending
	Applied map[int]bool // versions recorded in the schema
	Table   string       // the quoted bookkeeping table
}

// UnknownAbove returns the applied versions above target that are not in s.All
// (applied by a newer skiplock), ascending.
func (s State) UnknownAbove(target int) []int {
	known := make(map[int]bool, len(s.All))
	for _, m := range s.All {
		known[m.Version] = true
	}
	var out []int
	for _, v := range s.AppliedList() {
		if v > target && !known[v] {
			out = append(out, v)
		}
	}
	return out
}

// AppliedList returns the applied versions, ascending.
func (s State) AppliedList() []int {
	out := make([]int, 0, len(s.Applied))
	for v := range s.Applied {
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}

// Tx runs fn in a transaction holding schema's migration lock, with search_path set to
// the schema so the SQL files need no prefix; it creates the schema and its bookkeeping
// table when they are missing.
func Tx(ctx context.Context, pool *pgxpool.Pool, schema string, all []Migration,
	fn func(ctx context.Context, tx pgx.Tx, s State) error,
) error {
	ident := pgx.Identifier{schema}.Sanitize()
	table := pgx.Identifier{schema, "schema_migrations"}.Sanitize()
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// Held until commit: a second migrator waits here, then sees the versions
		// recorded by the first.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, lockKey, schema); err != nil {
			return fmt.Errorf("skiplock: migrate: lock: %w", err)
		}
		// Each CREATE only when its object is missing: CREATE SCHEMA IF NOT EXISTS checks
		// the CREATE privilege on the database even when the schema exists, so a role that
		// owns the schema (and has nothing on the database) could not migrate otherwise.
		var hasSchema, hasTable bool
		if err := tx.QueryRow(ctx, `SELECT to_regnamespace($1) IS NOT NULL, to_regclass($2) IS NOT NULL`,
			ident, table).Scan(&hasSchema, &hasTable); err != nil {
			return fmt.Errorf("skiplock: migrate schema %q: %w", schema, err)
		}
		var stmts []string
		if !hasSchema {
			stmts = append(stmts, `CREATE SCHEMA IF NOT EXISTS `+ident)
		}
		if !hasTable {
			stmts = append(stmts, `CREATE TABLE IF NOT EXISTS `+table+` (
				version    integer PRIMARY KEY,
				name       text NOT NULL,
				applied_at timestamptz NOT NULL DEFAULT now())`)
		}
		// pg_temp last: a function created with SET search_path FROM CURRENT (migration 11's
		// enqueue) keeps this path, and a session's temporary table must not stand in for
		// the schema's (unlisted, pg_temp would come first).
		stmts = append(stmts, `SET LOCAL search_path TO `+ident+`, pg_temp`)
		for _, q := range stmts {
			if _, err := tx.Exec(ctx, q); err != nil {
				return fmt.Errorf("skiplock: migrate schema %q: %w", schema, err)
			}
		}
		rows, err := tx.Query(ctx, `SELECT version FROM `+table)
		if err != nil {
			return err
		}
		versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
		if err != nil {
			return err
		}
		applied := map[int]bool{}
		for _, v := range versions {
			applied[v] = true
		}
		return fn(ctx, tx, State{All: all, Applied: applied, Table: table})
	})
}
