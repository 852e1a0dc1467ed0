package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
)

type sqlJob struct {
	N int `json:"n"`
}

func (sqlJob) Kind() string { return "sql_job" }

// schemaShape describes a schema's tables, columns and indexes, with its name taken out,
// to compare a schema built from migrate sql's files with one built by Migrate.
func schemaShape(t *testing.T, conn *pgx.Conn, schema string) []string {
	t.Helper()
	rows, err := conn.Query(t.Context(), `
SELECT 'col ' || table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable || ' ' || coalesce(column_default, '')
FROM information_schema.columns WHERE table_schema = $1
UNION ALL
SELECT 'idx ' || replace(indexdef, quote_ident($1) || '.', 'S.') FROM pg_indexes WHERE schemaname = $1
UNION ALL
SELECT 'con ' || conrelid::regclass::text || ' ' || pg_get_constraintdef(oid) FROM pg_constraint
WHERE connamespace = to_regnamespace(quote_ident($1))
UNION ALL
SELECT 'fn ' || proname || '(' || pg_get_function_arguments(oid) || ') ' || pg_get_function_result(oid) || ' '
    || coalesce(array_to_string(proconfig, ' '), '') || ' ' || md5(prosrc) || ' ' || coalesce(obj_description(oid, 'pg_proc'), '')
FROM pg_proc WHERE pronamespace = to_regnamespace(quote_ident($1))`, schema)
	require.NoError(t, err)
	shape, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	for i := range shape {
		shape[i] = strings.ReplaceAll(shape[i], schema+".", "S.")
		shape[i] = strings.ReplaceAll(shape[i], "search_path="+schema+",", "search_path=S,") // a function's pinned path
	}
	slices.Sort(shape)
	return shape
}

// gooseSplit splits a goose file's section into the statements goose sends: a statement
// ends at a line ending with a semicolon (before any -- comment), except between
// -- +goose StatementBegin and StatementEnd, whose lines are one statement.
func gooseSplit(section string) []string {
	var stmts []string
	var buf strings.Builder
	flush := func() {
		if strings.TrimSpace(buf.String()) != "" {
			stmts = append(stmts, buf.String())
		}
		buf.Reset()
	}
	inBlock := false
	for _, line := range strings.Split(section, "\n") {
		switch strings.TrimSpace(line) {
		case "-- +goose Up", "-- +goose Down":
			continue
		case "-- +goose StatementBegin":
			flush()
			inBlock = true
			continue
		case "-- +goose StatementEnd":
			flush()
			inBlock = false
			continue
		}
		buf.WriteString(line + "\n")
		code, _, _ := strings.Cut(line, "--")
		if !inBlock && strings.HasSuffix(strings.TrimSpace(code), ";") {
			flush()
		}
	}
	flush()
	return stmts
}

// TestMigrateSQL_FilesBuildTheSchemaAndAWorkerRunsOnIt writes the migrations for each
// format, applies them by hand the way a migration tool would — with search_path on an
// empty decoy schema, so any statement that relied on it would land there — and checks
// that the schema is the one Migrate builds, that skiplock sees it as migrated, that a
// worker runs a job on it, and that the down files take it all back.
func TestMigrateSQL_FilesBuildTheSchemaAndAWorkerRunsOnIt(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ref := pgtest.Schema(t)
	pool := pgtest.Pool(t)
	require.NoError(t, skiplock.Migrate(t.Context(), pool, skiplock.MigrateConfig{Schema: ref}))
	conn, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	want := schemaShape(t, conn, ref)
	require.NotEmpty(t, want)

	for _, format := range []string{formatGolangMigrate, formatGoose, formatAtlas, formatPlain} {
		t.Run(format, func(t *testing.T) {
			schema := pgtest.Schema(t)
			decoy := pgtest.Schema(t)
			dir := t.TempDir()
			r := cli(t, nil, "migrate", "sql", "--schema", schema, "--format", format, "--out", dir)
			require.Equal(t, 0, r.code, r.String())
			names, err := filepath.Glob(filepath.Join(dir, "*.sql"))
			require.NoError(t, err)
			slices.Sort(names)
			var ups, downs []string
			for _, n := range names {
				b, err := os.ReadFile(n)
				require.NoError(t, err)
				body := string(b)
				switch {
				case format == formatGoose:
					up, down, ok := strings.Cut(body, "-- +goose Down\n")
					require.True(t, ok, n)
					require.Contains(t, up, "-- +goose Up\n")
					ups, downs = append(ups, up), append(downs, down)
				case strings.HasSuffix(n, ".down.sql"):
					downs = append(downs, body)
				default:
					ups = append(ups, body)
				}
			}
			require.Len(t, ups, len(migrationVersions(t)))

			c, err := pgx.Connect(t.Context(), url)
			require.NoError(t, err)
			defer c.Close(context.Background())
			_, err = c.Exec(t.Context(), "SET search_path TO "+pgx.Identifier{decoy}.Sanitize())
			require.NoError(t, err)
			apply := func(file string) error {
				if format != formatGoose {
					_, err := c.Exec(t.Context(), file) // the simple protocol: the file as a tool sends it
					return err
				}
				// goose sends a file statement by statement, in a transaction.
				return pgx.BeginFunc(t.Context(), c, func(tx pgx.Tx) error {
					for _, stmt := range gooseSplit(file) {
						if _, err := tx.Exec(t.Context(), stmt); err != nil {
							return fmt.Errorf("%w in the statement goose would send:\n%s", err, stmt)
						}
					}
					return nil
				})
			}
			for i, up := range ups {
				require.NoError(t, apply(up), "up file %d", i+1)
			}
			var inDecoy int
			require.NoError(t, c.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM pg_class WHERE relnamespace = to_regnamespace($1))
				+ (SELECT count(*) FROM pg_proc WHERE pronamespace = to_regnamespace($1))`, decoy).Scan(&inDecoy))
			assert.Zero(t, inDecoy, "nothing relied on search_path")
			assert.Equal(t, want, schemaShape(t, conn, schema), "the schema Migrate builds")

			// skiplock sees it migrated: CheckSchema, Migrate (nothing to do), a worker.
			client, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema})
			require.NoError(t, err)
			require.NoError(t, client.CheckSchema(t.Context()))
			require.NoError(t, skiplock.Migrate(t.Context(), pool, skiplock.MigrateConfig{Schema: schema}))
			st, err := skiplock.GetMigrationStatus(t.Context(), pool, skiplock.MigrateConfig{Schema: schema})
			require.NoError(t, err)
			assert.Equal(t, st.Latest, st.Current)
			if format == formatAtlas || format == formatPlain {
				return // up files only
			}
			job, err := client.Enqueue(t.Context(), sqlJob{N: 1}, nil)
			require.NoError(t, err)
			w, err := skiplock.NewWorker(client, skiplock.WorkerConfig{})
			require.NoError(t, err)
			ran := make(chan int, 1)
			require.NoError(t, skiplock.Handle(w, func(_ context.Context, j *skiplock.Job[sqlJob]) error {
				ran <- j.Args.N
				return nil
			}))
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { done <- w.Run(ctx) }()
			select {
			case n := <-ran:
				assert.Equal(t, 1, n)
			case <-time.After(30 * time.Second):
				t.Fatal("the worker did not run the job")
			}
			cancel()
			require.NoError(t, <-done)
			got, err := client.Get(t.Context(), job.ID)
			require.NoError(t, err)
			assert.Equal(t, skiplock.StatusSucceeded, got.Status)

			// Down, newest first: only the bookkeeping table stays, empty.
			for i := len(downs) - 1; i >= 0; i-- {
				require.NoError(t, apply(downs[i]), "down file %d", i+1)
			}
			var tables []string
			rows, err := c.Query(t.Context(), `SELECT tablename FROM pg_tables WHERE schemaname = $1`, schema)
			require.NoError(t, err)
			tables, err = pgx.CollectRows(rows, pgx.RowTo[string])
			require.NoError(t, err)
			assert.Equal(t, []string{"schema_migrations"}, tables)
		})
	}
}

func TestMigrateSQL_PrintsToStdoutAndRefusesBadInput(t *testing.T) {
	t.Parallel()
	r := cli(t, nil, "migrate", "sql", "--schema", "billing")
	require.Equal(t, 0, r.code, r.String())
	assert.Contains(t, r.stdout, `CREATE TABLE "billing".jobs (`)
	assert.Contains(t, r.stdout, `CREATE INDEX jobs_claim_idx ON "billing".jobs`)
	assert.Contains(t, r.stdout, `INSERT INTO "billing"."schema_migrations" (version, name) VALUES (1, 'jobs');`)
	assert.NotContains(t, r.stdout, "search_path TO")

	for _, bad := range []string{"Billing", `a"b`, "x; DROP TABLE y", "1abc", strings.Repeat("a", 49), "a-b", ""} {
		r := cli(t, nil, "migrate", "sql", "--schema", bad)
		assert.Equal(t, exitUsage, r.code, "%q: %s", bad, r)
		assert.Empty(t, r.stdout, "%q: nothing printed", bad)
	}
	r = cli(t, nil, "migrate", "sql", "--format", "flyway")
	assert.Equal(t, exitUsage, r.code, r.String())
	assert.Contains(t, r.stderr, "golang-migrate")
}
