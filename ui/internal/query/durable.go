package query

// This file holds the job page's reads of a job's durable records (docs/durable.md): a
// bounded part of its steps and signals, with how many there are, where the client's
// Steps and Signals return them all.

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// stepsSQL reads the first $2 and the last $2 steps of job $1 by seq, each result's
// text cut to $3 characters with its full size, and the job's count of steps. The seqs
// are picked first, by the two ends of the job's range of the primary key, so a job of a
// million steps costs the page $2 rows from each end and a count over the index.
const stepsSQL = `SELECT seq, name, kind,
	CASE WHEN error = 'timeout' THEN 'timed_out' WHEN finished_at IS NOT NULL THEN 'done' ELSE 'waiting' END,
	coalesce(left(result::text, $3), ''), coalesce(octet_length(result::text), 0), attempt, started_at, wake_at, finished_at,
	(SELECT count(*) FROM {s}.job_steps WHERE job_id = $1)
FROM {s}.job_steps
WHERE job_id = $1 AND seq IN (
	(SELECT seq FROM {s}.job_steps WHERE job_id = $1 ORDER BY seq LIMIT $2)
	UNION
	(SELECT seq FROM {s}.job_steps WHERE job_id = $1 ORDER BY seq DESC LIMIT $2))
ORDER BY seq`

// signalsSQL reads the newest $2 signals of job $1, oldest of them first, each payload's
// text cut to $3 characters, and the job's count of signals. The ids are picked first
// from job_signals_job_idx (job_id, name, id), which holds them without the payloads, and
// only those rows are read.
const signalsSQL = `SELECT s.id, s.name, left(s.payload::text, $3), octet_length(s.payload::text), s.sent_at, s.consumed_seq,
	(SELECT count(*) FROM {s}.job_signals WHERE job_id = $1)
FROM {s}.job_signals s
WHERE s.id IN (SELECT id FROM {s}.job_signals WHERE job_id = $1 ORDER BY id DESC LIMIT $2)
ORDER BY s.id`

// Step is a recorded step of a job, as its page shows it.
type Step struct {
	Seq         int
	Name        string
	Kind        string
	Status      string // done, waiting or timed_out
	Result      string // the result's JSON text, cut to the limit Steps was given
	ResultBytes int    // the size of the whole result's text
	Attempt     int    // 0 for a step Fork copied
	StartedAt   time.Time
	WakeAt      *time.Time
	FinishedAt  *time.Time
}

// Signal is a signal sent to a job, as its page shows it.
type Signal struct {
	ID           int64
	Name         string
	Payload      string // the payload's JSON text, cut to the limit Signals was given
	PayloadBytes int    // the size of the whole payload's text
	SentAt       time.Time
	ConsumedSeq  *int
}

// Durable reads a job's steps and signals for its page.
type Durable struct {
	pool           *pgxpool.Pool
	steps, signals string
}

func newDurable(pool *pgxpool.Pool, x func(string) string) *Durable {
	return &Durable{pool: pool, steps: x(stepsSQL), signals: x(signalsSQL)}
}

// Steps returns job's first ends and last ends steps in seq order (each result cut to
// maxText characters), and how many steps it recorded.
func (d *Durable) Steps(ctx context.Context, job int64, ends, maxText int) ([]Step, int64, error) {
	rows, err := d.pool.Query(ctx, d.steps, job, ends, maxText)
	if err != nil {
		return nil, 0, err
	}
	var list []Step
	var st Step
	var total int64
	_, err = pgx.ForEachRow(rows, []any{&st.Seq, &st.Name, &st.Kind, &st.Status, &st.Result, &st.ResultBytes,
		&st.Attempt, &st.StartedAt, &st.WakeAt, &st.FinishedAt, &total}, func() error {
		list = append(list, st)
		st = Step{}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	return list, total, nil
}

// Signals returns job's newest limit signals, oldest of them first (each payload cut to
// maxText characters), and how many signals it was sent.
func (d *Durable) Signals(ctx context.Context, job int64, limit, maxText int) ([]Signal, int64, error) {
	rows, err := d.pool.Query(ctx, d.signals, job, limit, maxText)
	if err != nil {
		return nil, 0, err
	}
	var list []Signal
	var sg Signal
	var total int64
	_, err = pgx.ForEachRow(rows, []any{&sg.ID, &sg.Name, &sg.Payload, &sg.PayloadBytes, &sg.SentAt, &sg.ConsumedSeq, &total}, func() error {
		list = append(list, sg)
		sg = Signal{}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	return list, total, nil
}
