package skiplock

// Tests of the completer's statements that pass over locked rows (complete.go).

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCompleter_PassesOverLockedRowsAndWritesThemLater: while the completer passes over
// locked rows, a success whose row another transaction locked (as a concurrent claim
// does) is not waited for: the other successes of its batch are written at once, and it
// is written by a later batch once the lock is gone. A stale success (its attempt no
// longer the row's) ends after skipLockedFor, written by the statement that waits, which
// finds it stale. Every completion mode.
func TestCompleter_PassesOverLockedRowsAndWritesThemLater(t *testing.T) {
	t.Parallel()
	for _, mode := range []Completion{CompletionArchive, CompletionDelete, CompletionKeep} {
		t.Run(map[Completion]string{CompletionArchive: "archive", CompletionDelete: "delete", CompletionKeep: "keep"}[mode], func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			c, pool, schema := claimSetup(t)
			for range 4 {
				_, err := c.Enqueue(ctx, fenceArgs{}, nil)
				require.NoError(t, err)
			}
			jobs, err := newClaimer(c, time.Minute).claim(ctx, DefaultQueue, 4, "w")
			require.NoError(t, err)
			require.Len(t, jobs, 4)
			slices.SortFunc(jobs, func(a, b claimedJob) int { return int(a.row.ID - b.row.ID) })
			keys := make([]jobKey, 4)
			for i, j := range jobs {
				keys[i] = jobKey{j.row.ID, j.fence}
			}
			keys[3].fence++ // a stale attempt: the row holds another fence

			var mu sync.Mutex
			var written []jobKey
			comp := newCompleter(pool, schema, func(string, string) Completion { return mode }, "w", DefaultCompleteBatchSize, DefaultCompleteFlushInterval,
				nil, batchListeners{written: func(k []jobKey) {
					mu.Lock()
					written = append(written, k...)
					mu.Unlock()
				}}, slog.New(slog.NewTextHandler(io.Discard, nil)))
			comp.skipFor()
			require.NoError(t, comp.Start(ctx))
			defer comp.Stop()

			recorded := func(id int64) bool {
				var running bool
				err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+pgx.Identifier{schema, "jobs"}.Sanitize()+
					` WHERE id = $1 AND status = 'running')`, id).Scan(&running)
				require.NoError(t, err)
				return !running
			}
			isWritten := func(k jobKey) bool {
				mu.Lock()
				defer mu.Unlock()
				return slices.Contains(written, k)
			}

			// Another transaction locks the row of the second job.
			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			defer tx.Rollback(ctx) //nolint:errcheck // ends the lock early on failure
			_, err = tx.Exec(ctx, `SELECT 1 FROM `+pgx.Identifier{schema, "jobs"}.Sanitize()+` WHERE id = $1 FOR UPDATE`, keys[1].id)
			require.NoError(t, err)

			for _, k := range keys {
				require.True(t, comp.add(k, &JobRow{}, nil, false, false))
			}
			require.Eventually(t, func() bool { return recorded(keys[0].id) && recorded(keys[2].id) }, 10*time.Second, 10*time.Millisecond,
				"the successes of unlocked rows are written without waiting for the lock")
			time.Sleep(100 * time.Millisecond)
			assert.False(t, recorded(keys[1].id), "the locked row")
			assert.False(t, isWritten(keys[1]), "the locked row's success is still on its way (its lease renewed)")
			assert.True(t, isWritten(keys[0]) && isWritten(keys[2]))

			require.NoError(t, tx.Rollback(ctx))
			require.Eventually(t, func() bool { return recorded(keys[1].id) && isWritten(keys[1]) }, 10*time.Second, 10*time.Millisecond,
				"the success is written once the lock is gone")
			require.Eventually(t, func() bool { return isWritten(keys[3]) }, skipLockedFor+10*time.Second, 50*time.Millisecond,
				"the stale success ends")
			assert.False(t, recorded(keys[3].id), "the stale success changed nothing")
		})
	}
}
