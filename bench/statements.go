package main

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
)

// statementsStart empties pg_stat_statements before a workload's runs (-statements),
// creating the extension in the database of pool first. A server that does not preload
// the module gets a note on stderr, and the run goes on.
func statementsStart(ctx context.Context, pool *pgxpool.Pool) {
	if _, err := pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		fmt.Fprintf(os.Stderr, "-statements: %v\n", err)
		return
	}
	if _, err := pool.Exec(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
		fmt.Fprintf(os.Stderr, "-statements: %v (is pg_stat_statements in shared_preload_libraries?)\n", err)
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
	if err != nil {
		fmt.Fprintf(os.Stderr, "-statements: %v\n", err)
		return
	}
	defer rows.Close()
	fmt.Fprintf(os.Stderr, "%s, %d run(s): database, calls, rows, exec ms, plan ms, WAL bytes, statement\n", label, runs)
	for rows.Next() {
		var db, q string
		var calls, n, execMs, planMs, wal int64
		if err := rows.Scan(&db, &calls, &n, &execMs, &planMs, &wal, &q); err != nil {
			fmt.Fprintf(os.Stderr, "-statements: %v\n", err)
			return
		}
		fmt.Fprintf(os.Stderr, "  %s, %d, %d, %d, %d, %d, %s\n", db, calls, n, execMs, planMs, wal, q)
	}
	if err := rows.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "-statements: %v\n", err)
	}
}
