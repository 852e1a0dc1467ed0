// This file holds CheckSchema: the cheap start-up check that the client's schema is
// migrated, so that a service fails at start rather than at its first enqueue.

package skiplock

import (
	"context"
	"fmt"
)

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
		return fmt.Errorf("skiplock: %w: schema %q has no skiplock tables (or the role cannot see them): run skiplock.Migrate with MigrateConfig{Schema: %q}, or `skiplock migrate up --schema %s`, and give every process the same schema name",
			ErrNotMigrated, c.schema, c.schema, c.schema)
	}
	if st.Current < st.Latest {
		return fmt.Errorf("skiplock: %w: schema %q is at migration %d of %d: run skiplock.Migrate (or `skiplock migrate up --schema %s`) before this version's workers and clients",
			ErrNotMigrated, c.schema, st.Current, st.Latest, c.schema)
	}
	return nil
}
