// This file holds the bulk insert: COPY, or one unnest insert when unique keys are
// involved, a constant number of statements whatever the count.

package enqueue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/skiplock/skiplock/internal/jobtype"
)

var copyColumns = []string{"queue", "kind", "payload", "priority", "max_attempts", "run_at"}

// insertMany writes jobs with at most four statements whatever their number: COPY for
// jobs due now (run_at from the column default, the database clock), COPY for scheduled
// jobs, or one unnest insert when unique keys need ON CONFLICT; then one notification
// per queue with due jobs.
func (w *writer) insertMany(ctx context.Context, db jobtype.DBTX, jobs []Job, callerTx bool) (int, error) {
	queues := map[string]bool{}
	hasUnique := false // or a per-job timeout or partition key, which the COPY columns do not carry
	hasMeta := false
	for i := range jobs {
		if jobs[i].dueNow() {
			queues[jobs[i].Queue] = true
		}
		if jobs[i].UniqueKey != nil || jobs[i].TimeoutMs != nil || jobs[i].PartitionKey != nil || jobs[i].ConcurrencyKeys != nil {
			hasUnique = true
		}
		if len(jobs[i].Metadata) > 2 {
			hasMeta = true
		}
	}
	var total int64
	if hasUnique || !canCopy(db) { // database/sql has no COPY (sqltx.go)
		n, err := w.insertManyUnique(ctx, db, jobs, callerTx)
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
			if j.RunAt == nil {
				r = []any{j.Queue, j.Kind, j.Payload, j.Priority, j.MaxAttempts}
			} else {
				r = []any{j.Queue, j.Kind, j.Payload, j.Priority, j.MaxAttempts, *j.RunAt}
			}
			if hasMeta {
				r = append(r, j.Metadata)
			}
			if j.RunAt == nil {
				now = append(now, r)
			} else {
				later = append(later, r)
			}
		}
		table := pgx.Identifier{w.schema, "jobs"}
		if len(now) > 0 {
			n, err := db.CopyFrom(ctx, table, nowCols, pgx.CopyFromRows(now))
			if err != nil {
				return 0, wrapErr(w.schema, "enqueue many", err)
			}
			total += n
		}
		if len(later) > 0 {
			n, err := db.CopyFrom(ctx, table, laterCols, pgx.CopyFromRows(later))
			if err != nil {
				return 0, wrapErr(w.schema, "enqueue many", err)
			}
			total += n
		}
	}
	if len(queues) > 0 {
		names := make([]string, 0, len(queues))
		for q := range queues {
			names = append(names, q)
		}
		if err := w.notify.Queues(ctx, db, names); err != nil {
			return 0, wrapErr(w.schema, "enqueue many", err)
		}
	}
	return int(total), nil
}

// insertManyUnique writes jobs of which some have unique keys with one unnest insert that
// skips duplicates. As in insertUnique, inside the caller's transaction the statement
// inserts only under READ COMMITTED; when it inserts nothing the isolation level is read,
// and under a stricter one the insert runs again inside a savepoint, so that a
// serialization failure leaves the caller's transaction usable.
func (w *writer) insertManyUnique(ctx context.Context, db jobtype.DBTX, jobs []Job, callerTx bool) (int64, error) {
	cols := unnestColumns(jobs)
	tag, err := db.Exec(ctx, w.sql.insertUnnest[b2i(callerTx)], cols...)
	if err != nil {
		return 0, wrapErr(w.schema, "enqueue many", err)
	}
	if tag.RowsAffected() > 0 || !callerTx {
		return tag.RowsAffected(), nil
	}
	var iso string
	if err := db.QueryRow(ctx, isolationSQL).Scan(&iso); err != nil {
		return 0, wrapErr(w.schema, "enqueue many", err)
	}
	if iso == "read committed" {
		return 0, nil // every job was a duplicate
	}
	if _, err := db.Exec(ctx, savepointSQL); err != nil {
		return 0, wrapErr(w.schema, "enqueue many", err)
	}
	tag, err = db.Exec(ctx, w.sql.insertUnnest[0], cols...)
	if err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, rerr := db.Exec(rctx, rollbackToSavepointSQL); rerr != nil {
			return 0, wrapErr(w.schema, "enqueue many", errors.Join(err, rerr))
		}
		if _, rerr := db.Exec(rctx, releaseSavepointSQL); rerr != nil {
			return 0, wrapErr(w.schema, "enqueue many", rerr)
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "40001" {
			return 0, fmt.Errorf("%w: a unique key is held by a job committed after this transaction's snapshot (%s); nothing was inserted and the transaction is still usable",
				ErrDuplicateJob, iso)
		}
		return 0, wrapErr(w.schema, "enqueue many", err)
	}
	if _, err := db.Exec(ctx, releaseSavepointSQL); err != nil {
		return 0, wrapErr(w.schema, "enqueue many", err)
	}
	return tag.RowsAffected(), nil
}

func unnestColumns(jobs []Job) []any {
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
		ckeys  = make([]*string, len(jobs))
	)
	for i := range jobs {
		j := &jobs[i]
		queue[i], kind[i], pay[i], prio[i], maxA[i], runAt[i], uniq[i] = j.Queue, j.Kind, string(j.Payload), j.Priority, j.MaxAttempts, j.RunAt, j.UniqueKey
		if j.UniqueStates != nil {
			s := strings.Join(j.UniqueStates, ",")
			states[i] = &s
		}
		tmo[i] = j.TimeoutMs
		meta[i] = j.metadataText()
		part[i], ckeys[i] = j.PartitionKey, j.ConcurrencyKeys
	}
	return []any{queue, kind, pay, prio, maxA, runAt, uniq, states, tmo, meta, part, ckeys}
}

// insertUnnestSQL is the bulk insert with unique keys: as insertUniqueSQL for every row,
// the finished states that count given per row as a comma-separated list (us).
func insertUnnestSQL(gate string) string {
	return `INSERT INTO {s}.jobs (queue, kind, payload, priority, max_attempts, run_at, unique_key, timeout_ms, metadata, partition_key, concurrency_keys)
SELECT q, k, p::jsonb, pr, ma, COALESCE(ra, now()), uk, tm, md::jsonb, pk, ck::jsonb
FROM unnest($1::text[], $2::text[], $3::text[], $4::smallint[], $5::int[], $6::timestamptz[], $7::text[], $8::text[], $9::bigint[], $10::text[], $11::text[], $12::text[])
	AS t(q, k, p, pr, ma, ra, uk, us, tm, md, pk, ck)
WHERE (uk IS NULL OR us IS NULL OR NOT EXISTS (
		SELECT 1 FROM {s}.jobs d
		WHERE d.unique_key = t.uk AND d.status NOT IN ('queued', 'running') AND d.status = ANY (string_to_array(t.us, ','))
		UNION ALL
		SELECT 1 FROM {s}.jobs_archive a WHERE a.unique_key = t.uk AND a.status = ANY (string_to_array(t.us, ','))))` + gate + `
` + onConflictUnique
}
