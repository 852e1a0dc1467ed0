// This file holds the log writer: the records a handler logged through skiplock.Logger
// are written when its attempt ends, before its outcome, in batches shared by the
// attempts that logged.

package record

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/groupcommit"
	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/pgutil"
)

// insertLogsSQL writes a batch of log records, given as arrays of their columns.
//
//   - Only for jobs still in the jobs table: the records are written before the outcome,
//     so the job is there unless it was deleted meanwhile, and a record never outlives
//     its job by this statement.
//   - ON CONFLICT DO NOTHING: the key (job_id, fence, seq) is the attempt's and the
//     record's, so a replay after a lost reply writes nothing twice.
//   - attrs come as text (the simple and exec protocols would send []byte as bytea).
const insertLogsSQL = `INSERT INTO {s}.job_logs (job_id, fence, seq, attempt, at, level, message, attrs)
SELECT u.job_id, u.fence, u.seq, u.attempt, u.at, u.level, u.message, u.attrs::jsonb
FROM unnest($1::bigint[], $2::bigint[], $3::int[], $4::int[], $5::timestamptz[], $6::int[], $7::text[], $8::text[])
	AS u(job_id, fence, seq, attempt, at, level, message, attrs)
WHERE EXISTS (SELECT 1 FROM {s}.jobs j WHERE j.id = u.job_id)
ON CONFLICT DO NOTHING`

// logWriteTimeout bounds how long an attempt's end waits for its records to be written;
// past it they are dropped (and logged so) and the outcome is recorded anyway.
const logWriteTimeout = 10 * time.Second

// LogWriter writes attempts' log records in batches: the attempts that end together
// share one statement and one commit.
type LogWriter struct {
	pool   *pgxpool.Pool
	sql    string
	logger *slog.Logger
	batch  *groupcommit.Batcher[[]jobtype.LogRecord]
}

// NewLogWriter returns the log writer of schema's jobs.
func NewLogWriter(pool *pgxpool.Pool, schema string, logger *slog.Logger) *LogWriter {
	w := &LogWriter{pool: pool, sql: pgutil.Render(schema, insertLogsSQL), logger: logger}
	w.batch = &groupcommit.Batcher[[]jobtype.LogRecord]{Window: time.Millisecond, MaxRows: 5000, MaxInFlight: 2, Write: w.write}
	return w
}

// Write writes the records st holds, if any, and waits until their batch is written. An
// attempt that logged nothing costs nothing. A nil writer or state writes nothing.
func (w *LogWriter) Write(st *jobtype.State) {
	if w == nil {
		return
	}
	recs := st.TakeLogs()
	if len(recs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), logWriteTimeout)
	defer cancel()
	if _, err := w.batch.Submit(ctx, recs, len(recs)); err != nil {
		w.logger.Warn("skiplock: a job's log records were not written in time and are dropped", "job", recs[0].JobID, "err", err)
	}
}

// write inserts the records of batch with one statement.
func (w *LogWriter) write(batch [][]jobtype.LogRecord) {
	n := 0
	for _, recs := range batch {
		n += len(recs)
	}
	ids, fences := make([]int64, 0, n), make([]int64, 0, n)
	seqs, attempts, levels := make([]int32, 0, n), make([]int32, 0, n), make([]int32, 0, n)
	ats, msgs, attrs := make([]time.Time, 0, n), make([]string, 0, n), make([]*string, 0, n)
	for _, recs := range batch {
		for _, r := range recs {
			ids, fences = append(ids, r.JobID), append(fences, r.Fence)
			seqs, attempts, levels = append(seqs, int32(r.Seq)), append(attempts, int32(r.Attempt)), append(levels, int32(r.Level))
			ats, msgs = append(ats, r.At), append(msgs, r.Message)
			var a *string
			if len(r.Attrs) > 0 {
				// jsonb refuses the NUL character, which encoding/json writes as \u0000.
				s := string(bytes.ReplaceAll(r.Attrs, []byte(`\u0000`), []byte(`\ufffd`)))
				a = &s
			}
			attrs = append(attrs, a)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), logWriteTimeout)
	defer cancel()
	err := pgutil.Retry(ctx, func() error {
		_, err := w.pool.Exec(ctx, w.sql, ids, fences, seqs, attempts, ats, levels, msgs, attrs)
		return err
	})
	if err != nil {
		w.logger.Warn("skiplock: writing jobs' log records failed; they are dropped", "records", n, "err", err)
	}
}

// logsSQL reads job $1's log records in the order they were logged (the key's order).
const logsSQL = `SELECT job_id, attempt, fence, seq, at, level, message, attrs FROM {s}.job_logs
WHERE job_id = $1 ORDER BY fence, seq`

// ReadLogs returns job id's log records, oldest first; an empty slice when none.
func ReadLogs(ctx context.Context, db jobtype.DBTX, schema string, id int64) ([]jobtype.LogRecord, error) {
	rows, err := db.Query(ctx, pgutil.Render(schema, logsSQL), id)
	if err != nil {
		return nil, err
	}
	out := []jobtype.LogRecord{}
	var r jobtype.LogRecord
	var level int
	var attrs []byte
	_, err = pgx.ForEachRow(rows, []any{&r.JobID, &r.Attempt, &r.Fence, &r.Seq, &r.At, &level, &r.Message, &attrs}, func() error {
		r.Level = slog.Level(level)
		r.Attrs = nil
		if len(attrs) > 0 {
			r.Attrs = json.RawMessage(bytes.Clone(attrs))
		}
		out = append(out, r)
		return nil
	})
	return out, err
}
