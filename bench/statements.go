package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// statementsStart empties pg_stat_statements, creating the extension in the database of
// pool first: before a workload's runs (-statements) or a fleet drain (-fleet-statements,
// named by flag in the notes). A server that does not preload the module gets a note on
// stderr, and the run goes on.
func statementsStart(ctx context.Context, pool *pgxpool.Pool, flag string) {
	if _, err := pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", flag, err)
		return
	}
	if _, err := pool.Exec(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v (is pg_stat_statements in shared_preload_libraries?)\n", flag, err)
	}
}

// printStatements writes header, then each row of a query on pg_stat_statements as its
// values joined by commas, indented; errors become notes prefixed with flag.
func printStatements(rows pgx.Rows, err error, flag, header string) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", flag, err)
		return
	}
	defer rows.Close()
	fmt.Fprintln(os.Stderr, header)
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", flag, err)
			return
		}
		parts := make([]string, len(vals))
		for i, v := range vals {
			parts[i] = fmt.Sprint(v)
		}
		fmt.Fprintf(os.Stderr, "  %s\n", strings.Join(parts, ", "))
	}
	if err := rows.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", flag, err)
	}
}

// statementsByDatabase writes, for each system's database (bench_<system>), the six
// statements that took the server the most time since statementsStart: calls, rows,
// execution and planning milliseconds (planning counted only with
// pg_stat_statements.track_planning on), WAL bytes, and the statement's start. The
// figures are totals over runs runs; divided by the jobs of those runs they give the
// server's time per job in each statement. The time is wall time inside the executor:
// it includes waits for the CPU, and leaves out the commit's flush and the protocol.
func statementsByDatabase(ctx context.Context, pool *pgxpool.Pool, label string, runs int) {
	rows, err := pool.Query(ctx, `SELECT datname, calls, rows, round(total_exec_time)::bigint,
		round(total_plan_time)::bigint, wal_bytes::bigint, left(regexp_replace(query, '\s+', ' ', 'g'), 80)
		FROM (SELECT d.datname, s.*, row_number() OVER (PARTITION BY s.dbid
				ORDER BY s.total_exec_time + s.total_plan_time DESC) AS n
			FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
			WHERE d.datname LIKE 'bench\_%') top
		WHERE n <= 6 ORDER BY datname, n`)
	printStatements(rows, err, "-statements",
		fmt.Sprintf("%s, %d run(s): database, calls, rows, exec ms, plan ms, WAL bytes, statement", label, runs))
}
