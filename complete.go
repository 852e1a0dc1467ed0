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
// attempts (fenceSQL).
func completeSQL(mode Completion) string {
	switch mode {
	case CompletionDelete:
		return `DELETE FROM {s}.jobs WHERE ` + fenceSQL
	case CompletionKeep:
		return `UPDATE {s}.jobs SET status = 'succeeded', finished_at = now(), locked_at = NULL,
	lease_until = NULL
WHERE ` + fenceSQL
	default:
		// One statement moves the rows: the DELETE's RETURNING feeds the archive INSERT.
		return `WITH done AS (
	DELETE FROM {s}.jobs WHERE ` + fenceSQL + `
	RETURNING *
)
INSERT INTO {s}.jobs_archive (id, queue, kind, payload, status, priority, run_at, attempts,
	max_attempts, locked_by, last_error, errors, unique_key, created_at, finished_at, fence)
SELECT id, queue, kind, payload, 'succeeded', priority, run_at, attempts,
	max_attempts, locked_by, last_error, errors, unique_key, created_at, now(), fence
FROM done`
	}
}

// completerLoops is how many success batches may be in flight at once.
const completerLoops = 2

// completer batches successes into one statement per flush.
type completer struct {
	pool       *pgxpool.Pool
	sql        string // completeSQL of the worker's mode, rendered
	workerID   string
	batchSize  int
	flushEvery time.Duration
	logger     *slog.Logger

	ch   chan jobKey
	quit chan struct{}
	done chan struct{}

	mu     sync.RWMutex // add holds it to read; stop to close
	closed bool
}

func newCompleter(pool *pgxpool.Pool, schema string, mode Completion, workerID string, batchSize int, flushEvery time.Duration, logger *slog.Logger) *completer {
	return &completer{
		pool: pool, sql: renderSQL(schema, completeSQL(mode)), workerID: workerID,
		batchSize: batchSize, flushEvery: flushEvery, logger: logger,
		ch: make(chan jobKey, 4096), quit: make(chan struct{}), done: make(chan struct{}),
	}
}

// add reports the success of a held attempt and whether the completer took it: after
// stop it takes nothing (and never blocks), and the caller must say so. A send that finds
// the channel full waits for the batching loops, which keep reading until stop.
func (c *completer) add(k jobKey) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return false
	}
	c.ch <- k
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

// run runs completerLoops batching loops over the same channel until stop, then closes done.
func (c *completer) run() {
	defer close(c.done)
	var wg sync.WaitGroup
	for range completerLoops {
		wg.Add(1)
		go func() { defer wg.Done(); c.loop() }()
	}
	wg.Wait()
}

func (c *completer) loop() {
	batch := make([]jobKey, 0, c.batchSize)
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

func (c *completer) flush(batch []jobKey) []jobKey {
	if len(batch) == 0 {
		return batch
	}
	// Sorted ids take row locks in one order, so concurrent batches cannot deadlock.
	sort.Slice(batch, func(i, j int) bool { return batch[i].id < batch[j].id })
	ids := make([]int64, len(batch))
	fences := make([]int64, len(batch))
	for i, k := range batch {
		ids[i], fences[i] = k.id, k.fence
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var n int64
	// A replay after a lost reply is harmless: rows the first run recorded no longer
	// match the fence.
	err := retryDB(ctx, func() error {
		tag, err := c.pool.Exec(ctx, c.sql, ids, fences, c.workerID)
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
	return batch[:0]
}
