package query

// This file holds the statements of the bulk actions by filter on the dead page: the
// count a confirmation shows and the batches the action then takes.

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// bulkPickSQL takes the next batch of dead and failed jobs matching the filter ({where},
// rendered like exactWindowSQL's, with queue and kind as $3 and $4), in id order from the
// cursor $1: jobs a batch left alone (a requeue skipped for its unique key) are not
// picked again.
const bulkPickSQL = `SELECT id FROM {s}.jobs WHERE {where} AND id > $1 ORDER BY id LIMIT $2`

// bulkCountSQL counts the jobs a bulk action would take, through jobs_stuck_idx.
const bulkCountSQL = `SELECT count(*) FROM {s}.jobs WHERE {where}`

// Bulk runs the bulk actions' statements, rendered for every filter shape.
type Bulk struct {
	pool        *pgxpool.Pool
	pick, count map[key]string
}

func newBulk(pool *pgxpool.Pool, x func(string) string) *Bulk {
	b := &Bulk{pool: pool, pick: map[key]string{}, count: map[key]string{}}
	for _, k := range keys() {
		b.pick[k] = strings.ReplaceAll(x(bulkPickSQL), "{where}", k.where(2))
		b.count[k] = strings.ReplaceAll(x(bulkCountSQL), "{where}", k.where(0))
	}
	return b
}

// bulkKey is the key of the dead and failed jobs (of f.Status, when set) matching f.
func bulkKey(f Filter) key {
	if f.Status != "" {
		return keyOf(string(f.Status), f)
	}
	return keyOf("stuck", f)
}

// Count counts the dead and failed jobs (of f.Status, when set) matching f's queue and
// kind.
func (b *Bulk) Count(ctx context.Context, f Filter) (int64, error) {
	var n int64
	err := b.pool.QueryRow(ctx, b.count[bulkKey(f)], append([]any{pgx.QueryExecModeExec}, filterArgs(f)...)...).Scan(&n)
	return n, err
}

// Pick returns the ids of the next at most n such jobs above the id after, in id order.
func (b *Bulk) Pick(ctx context.Context, f Filter, after, n int64) ([]int64, error) {
	rows, err := b.pool.Query(ctx, b.pick[bulkKey(f)], append([]any{pgx.QueryExecModeExec, after, n}, filterArgs(f)...)...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}
