// This file holds bulk enqueueing: EnqueueMany and EnqueueManyTx, written with COPY (or
// one unnest insert when unique keys are involved), a constant number of statements
// whatever the count.

package skiplock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// EnqueueMany inserts many jobs in one transaction of its own with a constant number of
// statements (COPY, or one multi-row insert when unique keys are used) and returns how
// many were inserted. Every job is validated before anything is written, and the jobs are
// committed all together or not at all. Jobs whose UniqueKey is already active are
// skipped and not counted.
//
// A call of at most 100 jobs without unique keys shares its statement and commit with
// concurrent Enqueue and EnqueueMany calls, as [Client.Enqueue] does (and with the same
// answer when ctx ends while it waits); its jobs still commit all together or not at all.
func (c *Client) EnqueueMany(ctx context.Context, params []EnqueueParams) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("skiplock: enqueue many: %w", err)
	}
	jobs, err := c.prepareMany(params)
	if err != nil || len(jobs) == 0 {
		return 0, err
	}
	finish, err := c.enqueuingMany(ctx, jobs)
	if err != nil {
		return 0, err
	}
	n, err := c.enqueueMany(ctx, jobs)
	finish(err)
	return n, err
}

// enqueueMany writes the prepared jobs of EnqueueMany: with concurrent calls when it can,
// else in a transaction of their own.
func (c *Client) enqueueMany(ctx context.Context, jobs []newJob) (int, error) {
	if c.batch != nil && len(jobs) <= coalesceManyMax && !slices.ContainsFunc(jobs, func(j newJob) bool { return !j.coalescable() }) {
		rows, err := c.coalesce(ctx, &enqueueRequest{jobs: jobs, many: true})
		if err == nil {
			return len(rows), nil
		}
		if !errors.Is(err, errInsertAlone) {
			return 0, err
		}
		// The batch was refused as a whole: write these jobs alone.
	}
	// READ COMMITTED whatever the server's default: a unique conflict then never raises.
	tx, err := c.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return 0, c.wrapErr("enqueue many", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	n, err := c.insertMany(ctx, tx, jobs, false)
	if err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, c.wrapErr("enqueue many", err)
	}
	return n, nil
}

// EnqueueManyTx is [Client.EnqueueMany] inside the caller's transaction tx.
func (c *Client) EnqueueManyTx(ctx context.Context, tx DBTX, params []EnqueueParams) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("skiplock: enqueue many: %w", err)
	}
	if tx == nil {
		return 0, errors.New("skiplock: EnqueueManyTx: tx is nil")
	}
	jobs, err := c.prepareMany(params)
	if err != nil || len(jobs) == 0 {
		return 0, err
	}
	finish, err := c.enqueuingMany(ctx, jobs)
	if err != nil {
		return 0, err
	}
	n, err := c.insertMany(ctx, tx, jobs, true)
	finish(err)
	return n, err
}

// enqueuingMany runs enqueuing for every job of an EnqueueMany call. The returned function
// must be called once with the insert's result (there are no rows to give the hooks); on
// error it has been called already.
func (c *Client) enqueuingMany(ctx context.Context, jobs []newJob) (func(error), error) {
	dones := make([]func(*JobRow, error), 0, len(jobs))
	finish := func(err error) {
		for _, d := range dones {
			d(nil, err)
		}
	}
	for i := range jobs {
		done, err := c.enqueuing(ctx, &jobs[i])
		if err != nil {
			err = fmt.Errorf("job %d of %d: %w", i, len(jobs), err)
			finish(err)
			return nil, err
		}
		dones = append(dones, done)
	}
	return finish, nil
}

func (c *Client) prepareMany(params []EnqueueParams) ([]newJob, error) {
	jobs := make([]newJob, len(params))
	for i := range params {
		j, err := c.prepare(params[i].Args, params[i].Options)
		if err != nil {
			return nil, fmt.Errorf("job %d of %d: %w", i, len(params), err)
		}
		jobs[i] = j
	}
	return jobs, nil
}

var copyColumns = []string{"queue", "kind", "payload", "priority", "max_attempts", "run_at"}

// insertMany writes jobs with at most four statements whatever their number: COPY for
// jobs due now (run_at from the column default, the database clock), COPY for scheduled
// jobs, or one unnest insert when unique keys need ON CONFLICT; then one notification
// per queue with due jobs.
func (c *Client) insertMany(ctx context.Context, db DBTX, jobs []newJob, callerTx bool) (int, error) {
	queues := map[string]bool{}
	hasUnique := false // or a per-job timeout or partition key, which the COPY columns do not carry
	hasMeta := false
	for i := range jobs {
		if jobs[i].dueNow() {
			queues[jobs[i].queue] = true
		}
		if jobs[i].uniqueKey != nil || jobs[i].timeoutMs != nil || jobs[i].partitionKey != nil {
			hasUnique = true
		}
		if len(jobs[i].metadata) > 2 {
			hasMeta = true
		}
	}
	var total int64
	if hasUnique || !canCopy(db) { // database/sql has no COPY (sqltx.go)
		n, err := c.insertManyUnique(ctx, db, jobs, callerTx)
		if err != nil {
			return 0, err
		}
		total = n
	} else {
		// Metadata is copied only when some job has any: the column default ('{}')
		// costs the COPY nothing.
		var now, later [][]any
		nowCols, laterCols := copyColumns[:5:5], copyColumns
		if hasMeta {
			nowCols, laterCols = append(nowCols, "metadata"), append(laterCols[:len(laterCols):len(laterCols)], "metadata")
		}
		for i := range jobs {
			j := &jobs[i]
			var r []any
			if j.runAt == nil {
				r = []any{j.queue, j.kind, j.payload, j.priority, j.maxAttempts}
			} else {
				r = []any{j.queue, j.kind, j.payload, j.priority, j.maxAttempts, *j.runAt}
			}
			if hasMeta {
				r = append(r, j.metadata)
			}
			if j.runAt == nil {
				now = append(now, r)
			} else {
				later = append(later, r)
			}
		}
		table := pgx.Identifier{c.schema, "jobs"}
		if len(now) > 0 {
			n, err := db.CopyFrom(ctx, table, nowCols, pgx.CopyFromRows(now))
			if err != nil {
				return 0, c.wrapErr("enqueue many", err)
			}
			total += n
		}
		if len(later) > 0 {
			n, err := db.CopyFrom(ctx, table, laterCols, pgx.CopyFromRows(later))
			if err != nil {
				return 0, c.wrapErr("enqueue many", err)
			}
			total += n
		}
	}
	if len(queues) > 0 {
		names := make([]string, 0, len(queues))
		for q := range queues {
			names = append(names, q)
		}
		if err := c.notify.Queues(ctx, db, names); err != nil {
			return 0, c.wrapErr("enqueue many", err)
		}
	}
	return int(total), nil
}

// insertManyUnique writes jobs of which some have unique keys with one unnest insert that
// skips duplicates. As in insertUnique, inside the caller's transaction the statement
// inserts only under READ COMMITTED; when it inserts nothing the isolation level is read,
// and under a stricter one the insert runs again inside a savepoint, so that a
// serialization failure leaves the caller's transaction usable.
func (c *Client) insertManyUnique(ctx context.Context, db DBTX, jobs []newJob, callerTx bool) (int64, error) {
	cols := unnestColumns(jobs)
	tag, err := db.Exec(ctx, c.sql.insertUnnest[b2i(callerTx)], cols...)
	if err != nil {
		return 0, c.wrapErr("enqueue many", err)
	}
	if tag.RowsAffected() > 0 || !callerTx {
		return tag.RowsAffected(), nil
	}
	var iso string
	if err := db.QueryRow(ctx, isolationSQL).Scan(&iso); err != nil {
		return 0, c.wrapErr("enqueue many", err)
	}
	if iso == "read committed" {
		return 0, nil // every job was a duplicate
	}
	if _, err := db.Exec(ctx, savepointSQL); err != nil {
		return 0, c.wrapErr("enqueue many", err)
	}
	tag, err = db.Exec(ctx, c.sql.insertUnnest[0], cols...)
	if err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, rerr := db.Exec(rctx, rollbackToSavepointSQL); rerr != nil {
			return 0, c.wrapErr("enqueue many", errors.Join(err, rerr))
		}
		if _, rerr := db.Exec(rctx, releaseSavepointSQL); rerr != nil {
			return 0, c.wrapErr("enqueue many", rerr)
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "40001" {
			return 0, fmt.Errorf("%w: a unique key is held by a job committed after this transaction's snapshot (%s); nothing was inserted and the transaction is still usable",
				ErrDuplicateJob, iso)
		}
		return 0, c.wrapErr("enqueue many", err)
	}
	if _, err := db.Exec(ctx, releaseSavepointSQL); err != nil {
		return 0, c.wrapErr("enqueue many", err)
	}
	return tag.RowsAffected(), nil
}

func unnestColumns(jobs []newJob) []any {
	var (
		queue  = make([]string, len(jobs))
		kind   = make([]string, len(jobs))
		pay    = make([]string, len(jobs))
		prio   = make([]int16, len(jobs))
		maxA   = make([]int32, len(jobs))
		runAt  = make([]*time.Time, len(jobs))
		uniq   = make([]*string, len(jobs))
		states = make([]*string, len(jobs))
		tmo    = make([]*int64, len(jobs))
		meta   = make([]string, len(jobs))
		part   = make([]*string, len(jobs))
	)
	for i := range jobs {
		j := &jobs[i]
		queue[i], kind[i], pay[i], prio[i], maxA[i], runAt[i], uniq[i] = j.queue, j.kind, string(j.payload), j.priority, j.maxAttempts, j.runAt, j.uniqueKey
		if j.uniqueStates != nil {
			s := strings.Join(j.uniqueStates, ",")
			states[i] = &s
		}
		tmo[i] = j.timeoutMs
		meta[i] = j.metadataText()
		part[i] = j.partitionKey
	}
	return []any{queue, kind, pay, prio, maxA, runAt, uniq, states, tmo, meta, part}
}

// insertUnnestSQL is the bulk insert with unique keys: as insertUniqueSQL for every row,
// the finished states that count given per row as a comma-separated list (us).
func insertUnnestSQL(gate string) string {
	return `INSERT INTO {s}.jobs (queue, kind, payload, priority, max_attempts, run_at, unique_key, timeout_ms, metadata, partition_key)
SELECT q, k, p::jsonb, pr, ma, COALESCE(ra, now()), uk, tm, md::jsonb, pk
FROM unnest($1::text[], $2::text[], $3::text[], $4::smallint[], $5::int[], $6::timestamptz[], $7::text[], $8::text[], $9::bigint[], $10::text[], $11::text[])
	AS t(q, k, p, pr, ma, ra, uk, us, tm, md, pk)
WHERE (uk IS NULL OR us IS NULL OR NOT EXISTS (
		SELECT 1 FROM {s}.jobs d
		WHERE d.unique_key = t.uk AND d.status NOT IN ('queued', 'running') AND d.status = ANY (string_to_array(t.us, ','))
		UNION ALL
		SELECT 1 FROM {s}.jobs_archive a WHERE a.unique_key = t.uk AND a.status = ANY (string_to_array(t.us, ','))))` + gate + `
` + onConflictUnique
}
