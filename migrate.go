package skiplock

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/migrate"
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
	c, all, err := migrateSetup(pool, cfg)
	if err != nil {
		return err
	}
	if latest := migrate.Latest(all); c.TargetVersion > latest {
		return fmt.Errorf("skiplock: migrate: TargetVersion %d is beyond the latest version this build knows, %d; nothing was applied", c.TargetVersion, latest)
	}
	// Read-only: needs USAGE on the schema and SELECT on schema_migrations, nothing more.
	st, err := migrationStatus(ctx, pool, c.Schema, all)
	if err != nil {
		return fmt.Errorf("skiplock: migrate: reading the applied versions of schema %q: %w", c.Schema, err)
	}
	if len(migrate.Pending(all, st.Applied, c.TargetVersion)) == 0 {
		return nil
	}
	return migrate.Tx(ctx, pool, c.Schema, all, func(ctx context.Context, tx pgx.Tx, s migrate.State) error {
		// The versions as read again under the lock: another migrator may have applied some.
		for _, m := range migrate.Pending(s.All, s.AppliedList(), c.TargetVersion) {
			if _, err := tx.Exec(ctx, m.Up); err != nil {
				return fmt.Errorf("skiplock: migration %d (%s) up: %w", m.Version, m.Name, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO `+s.Table+` (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
				return err
			}
		}
		return nil
	})
}

// MigrateDown reverts applied migrations, newest first, down to cfg.TargetVersion
// (0: all of them, which drops skiplock's tables and every job in them; the schema
// itself and its bookkeeping table stay). It refuses, reverting nothing, when a version
// it would revert is one this build does not know (applied by a newer skiplock, which
// alone has its down file): revert those with that skiplock first.
func MigrateDown(ctx context.Context, pool *pgxpool.Pool, cfg ...MigrateConfig) error {
	c, all, err := migrateSetup(pool, cfg)
	if err != nil {
		return err
	}
	return migrate.Tx(ctx, pool, c.Schema, all, func(ctx context.Context, tx pgx.Tx, s migrate.State) error {
		if unknown := s.UnknownAbove(c.TargetVersion); len(unknown) > 0 {
			latest := migrate.Latest(all)
			return fmt.Errorf("skiplock: schema %q has migration(s) %v, which this build of skiplock does not know (it knows up to %d) and cannot revert; "+
				"nothing was reverted: first revert them with the skiplock that applied them (down to version %d)",
				c.Schema, unknown, latest, latest)
		}
		for i := len(all) - 1; i >= 0; i-- {
			m := all[i]
			if m.Version <= c.TargetVersion || !s.Applied[m.Version] {
				continue
			}
			if _, err := tx.Exec(ctx, m.Down); err != nil {
				return fmt.Errorf("skiplock: migration %d (%s) down: %w", m.Version, m.Name, err)
			}
			if _, err := tx.Exec(ctx, `DELETE FROM `+s.Table+` WHERE version = $1`, m.Version); err != nil {
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
	c, all, err := migrateSetup(pool, cfg)
	if err != nil {
		return MigrationStatus{}, err
	}
	return migrationStatus(ctx, pool, c.Schema, all)
}

// migrateSetup checks pool, validates cfg and loads the migrations (internal/migrate).
func migrateSetup(pool *pgxpool.Pool, cfg []MigrateConfig) (MigrateConfig, []migrate.Migration, error) {
	if pool == nil {
		return MigrateConfig{}, nil, errors.New("skiplock: migrate: pool is nil")
	}
	c, err := migrateConfig(cfg)
	if err != nil {
		return c, nil, err
	}
	all, err := migrate.Load()
	return c, all, err
}

// migrationStatus reads the versions recorded in schema (internal/migrate, ReadStatus).
func migrationStatus(ctx context.Context, pool *pgxpool.Pool, schema string, all []migrate.Migration) (MigrationStatus, error) {
	st, err := migrate.ReadStatus(ctx, pool, schema, all)
	out := MigrationStatus{Latest: migrate.Latest(all), Applied: st.Applied, Pending: st.Pending}
	if len(st.Applied) > 0 {
		out.Current = st.Applied[len(st.Applied)-1]
	}
	return out, err
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
	all, err := migrate.Load()
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
