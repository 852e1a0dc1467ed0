// This file holds the recording of successes: the completion modes (archive, delete,
// keep), their fenced statements, and the completer that batches many successes into
// one statement per flush.

package skiplock

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Completion says what happens to a job row when its handler succeeds.
type Completion int

// The completion modes.
const (
	// CompletionArchive moves the row to jobs_archive with status succeeded: the hot table
	// stays small and the history stays queryable until the archive retention deletes it.
	CompletionArchive Completion = iota
	// CompletionDelete deletes the row: the least work per job, no history.
	CompletionDelete
	// CompletionKeep keeps the row in the jobs table with status succeeded; the sweeper
	// deletes it after the archive retention.
	CompletionKeep
)

// completeSQL returns the statement that records successes in mode, matching the claimed
// attempts (fenceSQL). With report, it also writes what the handlers reported: $4 holds
// each job's output and $5 its latest progress (NULL where none), found by the job's place
// in $1 like its fence. Batches where no handler reported anything use the plain statement.
func completeSQL(mode Completion, report bool) string {
	output, progress := `output`, `progress`
	if report {
		output = `(($4::text[])[array_position($1::bigint[], id)])::jsonb`
		progress = `coalesce((($5::text[])[array_position($1::bigint[], id)])::jsonb, progress)`
	}
	switch mode {
	case CompletionDelete:
		return `DELETE FROM {s}.jobs WHERE ` + fenceSQL
	case CompletionKeep:
		set := ``
		if report {
			set = `, output = ` + output + `, progress = ` + progress
		}
		return `UPDATE {s}.jobs SET status = 'succeeded', finished_at = now(), locked_at = NULL,
	lease_until = NULL` + set + `
WHERE ` + fenceSQL
	default:
		// One statement moves the rows: the DELETE's RETURNING feeds the archive INSERT.
		return `WITH done AS (
	DELETE FROM {s}.jobs WHERE ` + fenceSQL + `
	RETURNING *
)
INSERT INTO {s}.jobs_archive (id, queue, kind, payload, status, priority, run_at, attempts,
	max_attempts, locked_by, last_error, errors, unique_key, created_at, finished_at, fence,
	metadata, progress, output)
SELECT id, queue, kind, payload, 'succeeded', priority, run_at, attempts,
	max_attempts, locked_by, last_error, errors, unique_key, created_at, now(), fence,
	metadata, ` + progress + `, ` + output + `
FROM done`
	}
}

// completerLoops is how many success batches may be in flight at once.
const completerLoops = 2

// completer batches successes into one statement per flush.
type completer struct {
	pool       *pgxpool.Pool
	sql        string // completeSQL of the worker's mode, rendered
	sqlReport  string // the same, writing outputs and progress; "" when the mode keeps none
	workerID   string
	batchSize  int
	flushEvery time.Duration
	logger     *slog.Logger

	// flushed, if set, is called after each batch is recorded: the jobs' slots are free
	// in the database only from then on (flow control claims again then).
	flushed func(n int)
	// written, if set, is called with the attempts of each batch once its statement ended,
	// written or not: the worker stops renewing their leases.
	written func(keys []jobKey)

	// urgent records the successes of jobs that hold a slot of a concurrency limit. A
	// slot is free again only once its job's success is committed, so they do not wait
	// out the batching interval when nothing else is coming: the success of the last
	// such job of the worker still running sends its batch at once. The others wait for
	// it, or for the interval, so that the jobs of one claim are recorded together and
	// their slots come back together: recorded one by one (tried: flush size 1, claims of
	// 3 jobs), each freed slot made a claim of its own, and per-statement costs took over.
	urgent *groupCommit[completion]

	ch   chan completion
	quit chan struct{}
	done chan struct{}

	mu     sync.RWMutex // add holds it to read; stop to close
	closed bool
}

func newCompleter(pool *pgxpool.Pool, schema string, mode Completion, workerID string, batchSize int, flushEvery time.Duration, logger *slog.Logger) *completer {
	c := &completer{
		pool: pool, sql: renderSQL(schema, completeSQL(mode, false)), workerID: workerID,
		batchSize: batchSize, flushEvery: flushEvery, logger: logger,
		ch: make(chan completion, 4096), quit: make(chan struct{}), done: make(chan struct{}),
	}
	if mode != CompletionDelete {
		c.sqlReport = renderSQL(schema, completeSQL(mode, true))
	}
	c.urgent = &groupCommit[completion]{window: flushEvery, maxRows: batchSize, maxInFlight: completerLoops, hold: true,
		write: func(batch []completion) { c.flush(batch) }}
	return c
}

// completion is one success to record, with what its handler reported (nil: nothing).
type completion struct {
	key              jobKey
	progress, output *string
}

// add reports the success of a held attempt, with what its handler reported (st may be
// nil), and whether the completer took it: after stop it takes nothing (and never blocks),
// and the caller must say so. A send that finds the channel full waits for the batching
// loops, which keep reading until stop. urgent: the job holds a slot of a concurrency
// limit (see c.urgent); last: no other such job of the worker is running, so its batch
// goes now.
func (c *completer) add(k jobKey, st *jobState, urgent, last bool) bool {
	p, o := st.reported()
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return false
	}
	switch {
	case urgent && last:
		c.urgent.postLast(completion{key: k, progress: p, output: o}, 1)
		return true
	case urgent:
		c.urgent.post(completion{key: k, progress: p, output: o}, 1)
		return true
	}
	c.ch <- completion{key: k, progress: p, output: o}
	return true
}

// stop makes run flush what was added and return. Every add that returned true is
// flushed: stop waits for the adds in flight before it closes quit.
func (c *completer) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed = true
		close(c.quit)
	}
}

// run runs completerLoops batching loops over the same channel until stop, waits for the
// urgent successes to be written, then closes done.
func (c *completer) run() {
	defer close(c.done)
	var wg sync.WaitGroup
	for range completerLoops {
		wg.Add(1)
		go func() { defer wg.Done(); c.loop() }()
	}
	wg.Wait()
	c.urgent.wait()
}

func (c *completer) loop() {
	batch := make([]completion, 0, c.batchSize)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case k := <-c.ch:
			if len(batch) == 0 {
				timer.Reset(c.flushEvery)
			}
			batch = append(batch, k)
			if len(batch) >= c.batchSize {
				timer.Stop()
				batch = c.flush(batch)
			}
		case <-timer.C:
			batch = c.flush(batch)
		case <-c.quit:
			timer.Stop()
			for {
				select {
				case k := <-c.ch:
					batch = append(batch, k)
					if len(batch) >= c.batchSize {
						batch = c.flush(batch)
					}
				default:
					c.flush(batch)
					return
				}
			}
		}
	}
}

// flushNow records, in the calling goroutine, the successes added while run is not
// running (a Worker's synchronous runs for skiplocktest).
func (c *completer) flushNow() {
	var batch []completion
	for {
		select {
		case k := <-c.ch:
			batch = append(batch, k)
		default:
			c.flush(batch)
			c.urgent.wait()
			return
		}
	}
}

func (c *completer) flush(batch []completion) []completion {
	if len(batch) == 0 {
		return batch
	}
	// Sorted ids take row locks in one order, so concurrent batches cannot deadlock.
	sort.Slice(batch, func(i, j int) bool { return batch[i].key.id < batch[j].key.id })
	ids := make([]int64, len(batch))
	fences := make([]int64, len(batch))
	report := false
	for i, k := range batch {
		ids[i], fences[i] = k.key.id, k.key.fence
		report = report || k.output != nil || k.progress != nil
	}
	q, args := c.sql, []any{ids, fences, c.workerID}
	if report && c.sqlReport != "" {
		outputs, progress := make([]*string, len(batch)), make([]*string, len(batch))
		for i, k := range batch {
			outputs[i], progress[i] = k.output, k.progress
		}
		q, args = c.sqlReport, append(args, outputs, progress)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var n int64
	// A replay after a lost reply is harmless: rows the first run recorded no longer
	// match the fence.
	err := retryDB(ctx, func() error {
		tag, err := c.pool.Exec(ctx, q, args...)
		n = tag.RowsAffected()
		return err
	})
	switch {
	case err != nil:
		c.logger.Error("skiplock: recording successes failed; the sweeper will reclaim those jobs and they will run again",
			"jobs", len(batch), "err", err)
	case n < int64(len(batch)):
		c.logger.Warn("skiplock: stale successes ignored: jobs were reclaimed or cancelled since this worker claimed them",
			"stale", int64(len(batch))-n)
	}
	if err == nil && c.flushed != nil {
		c.flushed(len(batch))
	}
	if c.written != nil {
		keys := make([]jobKey, len(batch))
		for i, k := range batch {
			keys[i] = k.key
		}
		c.written(keys)
	}
	return batch[:0]
}
