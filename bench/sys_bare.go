package main

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// bare is the reference for single inserts: a plain INSERT of the same JSON
// payload into a table with an identity key and a timestamp, one statement and
// one commit per call, with no queue around it. It runs only the single-insert
// workload; its rate is what one commit per job allows on this server.
func init() { register("bare", func() System { return &bareSystem{} }) }

type bareSystem struct{ pool *pgxpool.Pool }

func (b *bareSystem) Name() string        { return "bare" }
func (b *bareSystem) HotTable() string    { return "bare_jobs" }
func (b *bareSystem) JobTables() []string { return []string{"bare_jobs"} }
func (b *bareSystem) Config() string {
	return "INSERT INTO bare_jobs (payload) VALUES ($1) per call, autocommit (id identity, created_at default now()); single inserts only"
}

func (b *bareSystem) Setup(ctx context.Context, pool *pgxpool.Pool) error {
	b.pool = pool
	_, err := pool.Exec(ctx, `CREATE TABLE bare_jobs (
		id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		payload jsonb NOT NULL,
		created_at timestamptz NOT NULL DEFAULT now())`)
	return err
}

func (b *bareSystem) Reset(ctx context.Context) error {
	_, err := b.pool.Exec(ctx, "TRUNCATE bare_jobs")
	return err
}

func (b *bareSystem) Bulk(int, time.Time, int) func(context.Context) error {
	return func(context.Context) error { return errUnsupported }
}

func (b *bareSystem) Insert(ctx context.Context, args NoopArgs) error {
	_, err := b.pool.Exec(ctx, `INSERT INTO bare_jobs (payload) VALUES ($1)`, args)
	return err
}

func (b *bareSystem) Start(context.Context, *Sink, Spec) error { return errUnsupported }
func (b *bareSystem) Stop(context.Context) error               { return nil }

func (b *bareSystem) Pending(ctx context.Context) (int64, error) {
	var n int64
	err := b.pool.QueryRow(ctx, `SELECT count(*) FROM bare_jobs`).Scan(&n)
	return n, err
}
