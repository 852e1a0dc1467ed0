package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock"
)

// migrateCommands returns the "migrate" group's subcommands that need a database.
func migrateCommands() []*command {
	return []*command{
		{
			name:    "migrate up",
			args:    "[--target N]",
			summary: "apply pending migrations (up to version N; default: all)",
			help: "Applies the schema migrations the schema lacks, in one transaction under an advisory\n" +
				"lock, so several processes may run it at once. It creates the schema if needed.",
			flags: func(fs *flag.FlagSet, o *options) {
				fs.IntVar(&o.target, "target", 0, "stop at version `N`; 0 means the latest")
			},
			check: func(o *options) error {
				if o.target < 0 {
					return usagef("migrate up", "migrate up: --target must be 0 (latest) or a version, got %d", o.target)
				}
				return nil
			},
			run: cmdMigrateUp,
		},
		{
			name:    "migrate down",
			args:    "--target N | --target 0 --yes",
			summary: "revert migrations down to version N (0, the default, needs --yes)",
			help: "Reverts applied migrations, newest first, down to version N. Version 0 reverts all of\n" +
				"them: that drops skiplock's tables and every job in them, so it needs --yes.",
			flags: func(fs *flag.FlagSet, o *options) {
				fs.IntVar(&o.target, "target", 0, "keep version `N` and revert the ones after it; 0 reverts every migration")
				fs.BoolVar(&o.yes, "yes", false, "confirm reverting to version 0, which drops every job")
			},
			check: func(o *options) error {
				if o.target < 0 {
					return usagef("migrate down", "migrate down: --target must be a version (0 or more), got %d", o.target)
				}
				if o.target == 0 && !o.yes {
					return usagef("migrate down", "migrate down to version 0 drops skiplock's tables and every job in them: "+
						"pass --yes to confirm, or --target N to keep version N")
				}
				return nil
			},
			run: cmdMigrateDown,
		},
		{
			name:    "migrate status",
			summary: "show the current, latest and applied versions",
			help:    "Shows which migrations the schema has and whether any are pending.",
			run:     cmdMigrateStatus,
		},
	}
}

// migrateStart connects, reads the schema's migration status and checks --target against
// the latest version this build knows: the common start of migrate up and down. The
// caller closes the pool.
func (a *app) migrateStart(ctx context.Context, o *options, op string) (*pgxpool.Pool, skiplock.MigrateConfig, skiplock.MigrationStatus, error) {
	client, pool, err := a.connect(ctx, op)
	if err != nil {
		return nil, skiplock.MigrateConfig{}, skiplock.MigrationStatus{}, err
	}
	mc := skiplock.MigrateConfig{Schema: client.Schema(), TargetVersion: o.target}
	before, err := skiplock.GetMigrationStatus(ctx, pool, mc)
	if err != nil {
		pool.Close()
		return nil, mc, before, fmt.Errorf("%s: reading the migration status of schema %q: %w", op, a.schema, err)
	}
	if o.target > before.Latest {
		pool.Close()
		return nil, mc, before, usagef(op, "%s: --target %d is beyond the latest version this build knows, %d", op, o.target, before.Latest)
	}
	return pool, mc, before, nil
}

// cmdMigrateUp applies the pending migrations up to --target (0: the latest).
func cmdMigrateUp(ctx context.Context, a *app, o *options) error {
	pool, mc, before, err := a.migrateStart(ctx, o, "migrate up")
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := skiplock.Migrate(ctx, pool, mc); err != nil {
		return fmt.Errorf("migrate up: schema %q: %w", a.schema, err)
	}
	after, err := skiplock.GetMigrationStatus(ctx, pool, mc)
	if err != nil {
		return fmt.Errorf("migrate up: reading the migration status of schema %q: %w", a.schema, err)
	}
	applied := newlyApplied(before.Applied, after.Applied)
	if len(applied) == 0 {
		_, err = fmt.Fprintf(a.stdout, "schema %q is at version %d (latest %d): nothing to apply\n", a.schema, after.Current, after.Latest)
		return err
	}
	if after.Current == before.Current {
		// Only a gap below the current version was filled (a migration added between
		// released ones, applied by this run).
		_, err = fmt.Fprintf(a.stdout, "applied migration(s) %v to schema %q, which stays at version %d (latest %d)\n", applied, a.schema, after.Current, after.Latest)
		return err
	}
	_, err = fmt.Fprintf(a.stdout, "migrated schema %q from version %d to %d (latest %d)\n", a.schema, before.Current, after.Current, after.Latest)
	return err
}

// newlyApplied returns the versions in after that are not in before.
func newlyApplied(before, after []int) []int {
	had := make(map[int]bool, len(before))
	for _, v := range before {
		had[v] = true
	}
	var out []int
	for _, v := range after {
		if !had[v] {
			out = append(out, v)
		}
	}
	return out
}

// cmdMigrateDown reverts migrations down to --target; its check has made sure that
// reverting everything was confirmed with --yes.
func cmdMigrateDown(ctx context.Context, a *app, o *options) error {
	pool, mc, before, err := a.migrateStart(ctx, o, "migrate down")
	if err != nil {
		return err
	}
	defer pool.Close()
	if before.Current <= o.target {
		_, err = fmt.Fprintf(a.stdout, "schema %q is at version %d: nothing to revert\n", a.schema, before.Current)
		return err
	}
	if err := skiplock.MigrateDown(ctx, pool, mc); err != nil {
		return fmt.Errorf("migrate down: schema %q: %w", a.schema, err)
	}
	after, err := skiplock.GetMigrationStatus(ctx, pool, mc)
	if err != nil {
		return fmt.Errorf("migrate down: reading the migration status of schema %q: %w", a.schema, err)
	}
	_, err = fmt.Fprintf(a.stdout, "reverted schema %q from version %d to %d\n", a.schema, before.Current, after.Current)
	return err
}

// cmdMigrateStatus prints the schema's current, latest and applied versions.
func cmdMigrateStatus(ctx context.Context, a *app, _ *options) error {
	client, pool, err := a.connect(ctx, "migrate status")
	if err != nil {
		return err
	}
	defer pool.Close()
	st, err := skiplock.GetMigrationStatus(ctx, pool, skiplock.MigrateConfig{Schema: client.Schema()})
	if err != nil {
		return fmt.Errorf("migrate status: schema %q: %w", a.schema, err)
	}
	applied := "none"
	if len(st.Applied) > 0 {
		applied = joinInts(st.Applied)
	}
	var state string
	switch {
	case st.Current == 0:
		state = fmt.Sprintf("not migrated: run '%s migrate up'", a.selfWithSchema())
	case len(st.Pending) > 0:
		state = fmt.Sprintf("%d migration(s) pending (%s): run '%s migrate up'", len(st.Pending), joinInts(st.Pending), a.selfWithSchema())
	case st.Current > st.Latest:
		state = fmt.Sprintf("newer than this build, which knows up to version %d: upgrade skiplock", st.Latest)
	default:
		state = "up to date"
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "schema:\t%s\n", a.schema)
	fmt.Fprintf(tw, "current:\t%d\n", st.Current)
	fmt.Fprintf(tw, "latest:\t%d\n", st.Latest)
	fmt.Fprintf(tw, "applied:\t%s\n", applied)
	fmt.Fprintf(tw, "state:\t%s\n", state)
	return tw.Flush()
}

// joinInts writes vs as "1, 2, 3".
func joinInts(vs []int) string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = strconv.Itoa(v)
	}
	return strings.Join(out, ", ")
}
