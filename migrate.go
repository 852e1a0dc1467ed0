package skiplock

import (
	"context"
	"errors"
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

// MigrateConfig says where and how far [Migrate] and [MigrateDown] go. The zero value
// migrates the default schema to the latest version.
type MigrateConfig struct {
	// Schema to migrate. It is created if missing. Defaults to "skiplock".
	Schema string
	// TargetVersion is the version to stop at. For Migrate, 0 means the latest, and a
	// version beyond the latest this build knows is refused; for MigrateDown, 0 means
	// remove every migration.
	TargetVersion int
}

// MigrationStatus is the state of a schema's migrations.
type MigrationStatus struct {
	Current int   // the highest applied version, 0 when none
	Latest  int   // the highest version this build knows
	Applied []int // applied versions, ascending
	// Pending are the versions this build knows that are not applied, ascending: those
	// above Current, and any below it (a version applied by a build without it).
	Pending []int
}

type migration struct {
	version  int
	name     string
	up, down string
}

// migrateLockKey is the first key of the transaction-scoped advisory lock that serializes
// migrations; the second is the hash of the schema name, so schemas migrate independently.
const migrateLockKey = 0x736b6970 // "skip"

// loadMigrations reads the embedded SQL files in version order.
func loadMigrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrations.FS, ".")
	if err != nil {
		return nil, err
	}
	byVersion := map[int]*migration{}
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
			m = &migration{version: v, name: strings.TrimSuffix(strings.TrimSuffix(rest, ".up.sql"), ".down.sql")}
			byVersion[v] = m
		}
		if dir == "up" {
			m.up = string(body)
		} else {
			m.down = string(body)
		}
	}
	out := make([]migration, 0, len(byVersion))
	for _, m := range byVersion {
		if m.up == "" || m.down == "" {
			return nil, fmt.Errorf("skiplock: migration %d needs both an up and a down file", m.version)
		}
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	return out, nil
}

func migrateConfig(cfg []MigrateConfig) (MigrateConfig, error) {
	var c MigrateConfig
	if len(cfg) > 1 {
		return c, errors.New("skiplock: pass at most one MigrateConfig")
	}
	if len(cfg) == 1 {
		c = cfg[0]
	}
	if c.Schema == "" {
		c.Schema = DefaultSchema
	}
	if c.TargetVersion < 0 {
		return c, fmt.Errorf("skiplock: TargetVersion %d is negative", c.TargetVersion)
	}
	return c, validSchema(c.Schema)
}

// Migrate applies the pending up migrations to the schema in cfg (default "skiplock"),
// creating it if needed. It runs in one transaction under an advisory lock, so any number
// of processes may call it at once: one applies each version, the others wait and find
// nothing to do.
//
// It first reads the applied versions with plain queries, and when nothing is pending it
// returns without taking the lock or creating anything: a role with only the table
// privileges of docs/operating.md's "Least privilege" section (the grants are in README.md, Install) may call it at start-up. Applying a
// migration needs the schema's owner (or CREATE on the database when the schema is missing).
func Migrate(ctx context.Context, pool *pgxpool.Pool, cfg ...MigrateConfig) error {
	if pool == nil {
		return errors.New("skiplock: migrate: pool is nil")
	}
	c, err := migrateConfig(cfg)
	if err != nil {
		return err
	}
	all, err := loadMigrations()
	if err != nil {
		return err
	}
	if latest := all[len(all)-1].version; c.TargetVersion > latest {
		return fmt.Errorf("skiplock: migrate: TargetVersion %d is beyond the latest version this build knows, %d; nothing was applied", c.TargetVersion, latest)
	}
	// Read-only: needs USAGE on the schema and SELECT on schema_migrations, nothing more.
	st, err := migrationStatus(ctx, pool, c.Schema, all)
	if err != nil {
		return fmt.Errorf("skiplock: migrate: reading the applied versions of schema %q: %w", c.Schema, err)
	}
	if len(pending(all, st.Applied, c.TargetVersion)) == 0 {
		return nil
	}
	return migrateTx(ctx, pool, cfg, func(ctx context.Context, tx pgx.Tx, s migrateState) error {
		// The versions as read again under the lock: another migrator may have applied some.
		for _, m := range pending(s.all, s.appliedList(), s.cfg.TargetVersion) {
			if _, err := tx.Exec(ctx, m.up); err != nil {
				return fmt.Errorf("skiplock: migration %d (%s) up: %w", m.version, m.name, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO `+s.table+` (version, name) VALUES ($1, $2)`, m.version, m.name); err != nil {
				return err
			}
		}
		return nil
	})
}

// pending returns the migrations of all (ascending) up to target (0: the latest) whose
// version is not in applied.
func pending(all []migration, applied []int, target int) []migration {
	if target == 0 {
		target = all[len(all)-1].version
	}
	var out []migration
	for _, m := range all {
		if m.version <= target && !slices.Contains(applied, m.version) {
			out = append(out, m)
		}
	}
	return out
}

// MigrateDown reverts applied migrations, newest first, down to cfg.TargetVersion
// (0: all of them, which drops skiplock's tables and every job in them; the schema
// itself and its bookkeeping table stay). It refuses, reverting nothing, when a version
// it would revert is one this build does not know (applied by a newer skiplock, which
// alone has its down file): revert those with that skiplock first.
func MigrateDown(ctx context.Context, pool *pgxpool.Pool, cfg ...MigrateConfig) error {
	return migrateTx(ctx, pool, cfg, func(ctx context.Context, tx pgx.Tx, s migrateState) error {
		if unknown := s.unknownAbove(s.cfg.TargetVersion); len(unknown) > 0 {
			latest := s.all[len(s.all)-1].version
			return fmt.Errorf("skiplock: schema %q has migration(s) %v, which this build of skiplock does not know (it knows up to %d) and cannot revert; "+
				"nothing was reverted: first revert them with the skiplock that applied them (down to version %d)",
				s.cfg.Schema, unknown, latest, latest)
		}
		for i := len(s.all) - 1; i >= 0; i-- {
			m := s.all[i]
			if m.version <= s.cfg.TargetVersion || !s.applied[m.version] {
				continue
			}
			if _, err := tx.Exec(ctx, m.down); err != nil {
				return fmt.Errorf("skiplock: migration %d (%s) down: %w", m.version, m.name, err)
			}
			if _, err := tx.Exec(ctx, `DELETE FROM `+s.table+` WHERE version = $1`, m.version); err != nil {
				return err
			}
		}
		return nil
	})
}

// GetMigrationStatus reports which migrations the schema in cfg has. It only reads: a role
// needs USAGE on the schema and SELECT on its schema_migrations table (nothing at all while
// the schema or the table does not exist).
func GetMigrationStatus(ctx context.Context, pool *pgxpool.Pool, cfg ...MigrateConfig) (MigrationStatus, error) {
	c, err := migrateConfig(cfg)
	if err != nil {
		return MigrationStatus{}, err
	}
	all, err := loadMigrations()
	if err != nil {
		return MigrationStatus{}, err
	}
	return migrationStatus(ctx, pool, c.Schema, all)
}

// migrationStatus reads the versions recorded in schema, with read-only statements.
func migrationStatus(ctx context.Context, pool *pgxpool.Pool, schema string, all []migration) (MigrationStatus, error) {
	st := MigrationStatus{Latest: all[len(all)-1].version}
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
	if len(st.Applied) > 0 {
		st.Current = st.Applied[len(st.Applied)-1]
	}
	st.Pending = pendingVersions(all, st.Applied)
	return st, err
}

// pendingVersions returns the versions of all that are not in applied, ascending.
func pendingVersions(all []migration, applied []int) []int {
	var out []int
	for _, m := range pending(all, applied, 0) {
		out = append(out, m.version)
	}
	return out
}

// migrateState is what a migration step sees inside migrateTx.
type migrateState struct {
	cfg     MigrateConfig
	all     []migration  // every known migration, ascending
	applied map[int]bool // versions recorded in the schema
	table   string       // the quoted bookkeeping table
}

// unknownAbove returns the applied versions above target that are not in s.all
// (applied by a newer skiplock), ascending.
func (s migrateState) unknownAbove(target int) []int {
	known := make(map[int]bool, len(s.all))
	for _, m := range s.all {
		known[m.version] = true
	}
	var out []int
	for _, v := range s.appliedList() {
		if v > target && !known[v] {
			out = append(out, v)
		}
	}
	return out
}

// appliedList returns the applied versions, ascending.
func (s migrateState) appliedList() []int {
	out := make([]int, 0, len(s.applied))
	for v := range s.applied {
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}

// migrateTx validates cfg, loads the migrations and runs fn in a transaction holding the
// schema's migration lock, with search_path set to the schema so the SQL files need no
// prefix.
func migrateTx(ctx context.Context, pool *pgxpool.Pool, cfg []MigrateConfig,
	fn func(ctx context.Context, tx pgx.Tx, s migrateState) error,
) error {
	if pool == nil {
		return errors.New("skiplock: migrate: pool is nil")
	}
	c, err := migrateConfig(cfg)
	if err != nil {
		return err
	}
	all, err := loadMigrations()
	if err != nil {
		return err
	}
	schema := c.Schema
	ident := pgx.Identifier{schema}.Sanitize()
	table := pgx.Identifier{schema, "schema_migrations"}.Sanitize()
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// Held until commit: a second migrator waits here, then sees the versions
		// recorded by the first.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, migrateLockKey, schema); err != nil {
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
		return fn(ctx, tx, migrateState{cfg: c, all: all, applied: applied, table: table})
	})
}

// CheckSchema reports whether the client's schema has every migration this version of
// skiplock needs, with two small read-only statements (is there a schema_migrations
// table; which versions it records). It returns nil when it has (a schema migrated by a
// newer skiplock is fine), and otherwise an error matching [ErrNotMigrated] that names
// the schema, its version and the latest, and says how to migrate. [NewClient] does no
// I/O, so a client on an unmigrated schema is only found out by its first call; call
// CheckSchema at start-up, after [Migrate] or instead of it where another process
// migrates, to fail there with a clear message. ([Worker.Run] returns ErrNotMigrated at
// start on a schema without its tables.)
func (c *Client) CheckSchema(ctx context.Context) error {
	all, err := loadMigrations()
	if err != nil {
		return err
	}
	st, err := migrationStatus(ctx, c.pool, c.schema, all)
	if err != nil {
		return c.wrapErr("check schema", err)
	}
	if st.Current == 0 {
		return fmt.Errorf("%w: schema %q has no skiplock tables (or the role cannot see them): run skiplock.Migrate with MigrateConfig{Schema: %q}, or `skiplock migrate up --schema %s`, and give every process the same schema name",
			ErrNotMigrated, c.schema, c.schema, c.schema)
	}
	if st.Current < st.Latest {
		return fmt.Errorf("%w: schema %q is at migration %d of %d: run skiplock.Migrate (or `skiplock migrate up --schema %s`) before this version's workers and clients",
			ErrNotMigrated, c.schema, st.Current, st.Latest, c.schema)
	}
	// A version below the current one can be missing: applied by a build without it (two
	// changes in flight took neighbouring numbers), and applied by Migrate whatever its place.
	if len(st.Pending) > 0 {
		return fmt.Errorf("%w: schema %q is at migration %d but lacks migration(s) %v: run skiplock.Migrate (or `skiplock migrate up --schema %s`) before this version's workers and clients",
			ErrNotMigrated, c.schema, st.Current, st.Pending, c.schema)
	}
	return nil
}
