package skiplock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

// depArgs is a job of the DependsOn tests: it records its run in dep_audit (database
// clock, with a sequence), waits on the test's gate when Gate is set, and fails
// permanently (Fail) or for good after its one attempt (Die) when told to.
type depArgs struct {
	Gate bool    `json:"gate,omitempty"`
	Fail bool    `json:"fail,omitempty"`
	Work int     `json:"work,omitempty"` // milliseconds of work
	Of   []int64 `json:"of,omitempty"`   // the parents, for the audit
}

func (depArgs) Kind() string { return "dep" }

// depSetup creates dep_audit and n workers running depArgs in mode; closing the returned
// gate lets gated jobs finish.
func depSetup(t *testing.T, mode skiplock.Completion, n int) (*bundle, []*skiplock.Worker, chan struct{}) {
	t.Helper()
	b := setup(t)
	_, err := b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.dep_audit (seq bigserial, job_id bigint, parents bigint[],
		started timestamptz NOT NULL, finished timestamptz NOT NULL)`))
	require.NoError(t, err)
	gate := make(chan struct{})
	var ws []*skiplock.Worker
	for range n {
		w := newWorker(t, b, skiplock.WorkerConfig{PollInterval: 50 * time.Millisecond, SweepInterval: -1,
			Completion: mode, Logger: testLogger()})
		require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[depArgs]) error {
			var started time.Time
			if err := b.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&started); err != nil {
				return err
			}
			if job.Args.Gate {
				select {
				case <-gate:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			work(ctx, time.Duration(job.Args.Work)*time.Millisecond)
			if job.Args.Fail {
				return skiplock.Permanent(errors.New("failed on purpose"))
			}
			_, err := b.pool.Exec(ctx, b.q(`INSERT INTO {s}.dep_audit (job_id, parents, started, finished)
				VALUES ($1, $2, $3, clock_timestamp())`), job.ID, job.Args.Of, started)
			return err
		}))
		ws = append(ws, w)
	}
	return b, ws, gate
}

func runs(t *testing.T, b *bundle, id int64) int {
	t.Helper()
	return b.count(t, `SELECT count(*) FROM {s}.dep_audit WHERE job_id = $1`, id)
}

// ranEarly counts the (dependent, parent) pairs of the dependents ids whose parent has no
// run recorded before the dependent's start (by the database clock and by the audit's
// sequence).
func ranEarly(t *testing.T, b *bundle, ids []int64) int {
	t.Helper()
	return b.count(t, `SELECT count(*) FROM {s}.dep_audit c CROSS JOIN unnest(c.parents) AS x(parent)
		LEFT JOIN {s}.dep_audit p ON p.job_id = x.parent
		WHERE c.job_id = ANY ($1) AND (p.job_id IS NULL OR c.started <= p.finished OR c.seq <= p.seq)`, ids)
}

func enqueueDep(t *testing.T, b *bundle, args depArgs, opts *skiplock.EnqueueOptions) *skiplock.JobRow {
	t.Helper()
	row, err := b.client.Enqueue(b.ctx, args, opts)
	require.NoError(t, err)
	return row
}

// A dependent waits while its parent is queued and while it runs — including a parent
// claimed before the dependent attached, which the worker that runs it knows nothing
// about — and runs once the parent has succeeded, after the parent's end; a parent
// already succeeded (archived, kept) satisfies a dependent at once.
func TestDependsOn_WaitsForQueuedAndRunningParentsThenRuns(t *testing.T) {
	t.Parallel()
	for name, mode := range map[string]skiplock.Completion{"archive": skiplock.CompletionArchive,
		"keep": skiplock.CompletionKeep, "delete": skiplock.CompletionDelete} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b, ws, gate := depSetup(t, mode, 1)
			queued := enqueueDep(t, b, depArgs{}, &skiplock.EnqueueOptions{Queue: "later"})
			running := enqueueDep(t, b, depArgs{Gate: true}, nil)
			runWorker(t, ws[0])
			waitStatus(t, b, running.ID, skiplock.StatusRunning, 10*time.Second, "the parent never started")

			onRunning := enqueueDep(t, b, depArgs{Of: []int64{running.ID}}, &skiplock.EnqueueOptions{DependsOn: []int64{running.ID}})
			onBoth := enqueueDep(t, b, depArgs{Of: []int64{queued.ID, running.ID}}, &skiplock.EnqueueOptions{DependsOn: []int64{queued.ID, running.ID}})
			holdsFor(t, 300*time.Millisecond, 50*time.Millisecond, func() {
				require.Zero(t, runs(t, b, onRunning.ID)+runs(t, b, onBoth.ID), "a dependent ran before its parents succeeded")
			})
			close(gate)
			eventually(t, 10*time.Second, func() bool { return runs(t, b, onRunning.ID) == 1 },
				"the dependent of a parent claimed before it attached never ran")
			holdsFor(t, 200*time.Millisecond, 50*time.Millisecond, func() {
				require.Zero(t, runs(t, b, onBoth.ID), "a dependent ran while a parent was still queued")
			})
			w2 := newWorker(t, b, skiplock.WorkerConfig{Queues: map[string]skiplock.QueueConfig{"later": {}},
				PollInterval: 50 * time.Millisecond, SweepInterval: -1, Completion: mode, Logger: testLogger()})
			require.NoError(t, skiplock.Handle(w2, func(ctx context.Context, job *skiplock.Job[depArgs]) error {
				_, err := b.pool.Exec(ctx, b.q(`INSERT INTO {s}.dep_audit (job_id, started, finished)
					VALUES ($1, clock_timestamp(), clock_timestamp())`), job.ID)
				return err
			}))
			runWorker(t, w2)
			eventually(t, 10*time.Second, func() bool { return runs(t, b, onBoth.ID) == 1 },
				"the dependent of two parents never ran")
			require.Zero(t, ranEarly(t, b, []int64{onRunning.ID, onBoth.ID}), "a dependent started before a parent finished")

			if mode != skiplock.CompletionDelete {
				late := enqueueDep(t, b, depArgs{}, &skiplock.EnqueueOptions{DependsOn: []int64{running.ID}})
				eventually(t, 10*time.Second, func() bool { return runs(t, b, late.ID) == 1 },
					"the dependent of a parent that had succeeded already did not run")
			}
			require.Zero(t, b.count(t, `SELECT (SELECT count(*) FROM {s}.job_waits) + (SELECT count(*) FROM {s}.job_dependencies)`),
				"dependency rows were left behind")
		})
	}
}

// A parent that ends without success — failed, dead, cancelled or deleted, before the
// dependent attached or after — cancels the dependent under the default policy, and
// counts as settled under RunDependents.
func TestDependsOn_AParentThatDoesNotSucceed(t *testing.T) {
	t.Parallel()
	ends := map[string]func(t *testing.T, b *bundle, id int64){
		"failed": func(t *testing.T, b *bundle, id int64) {
			waitStatus(t, b, id, skiplock.StatusFailed, 10*time.Second, "the parent did not fail")
		},
		"dead": func(t *testing.T, b *bundle, id int64) {
			waitStatus(t, b, id, skiplock.StatusDead, 10*time.Second, "the parent did not die")
		},
		"cancelled": func(t *testing.T, b *bundle, id int64) {
			_, err := b.client.Cancel(b.ctx, id)
			require.NoError(t, err)
		},
		"deleted": func(t *testing.T, b *bundle, id int64) {
			_, err := b.client.Delete(b.ctx, id)
			require.NoError(t, err)
		},
	}
	for end, finish := range ends {
		for _, policy := range []skiplock.OnFailure{skiplock.CancelDependents, skiplock.RunDependents} {
			t.Run(fmt.Sprintf("%s/policy=%d", end, policy), func(t *testing.T) {
				t.Parallel()
				b, ws, _ := depSetup(t, skiplock.CompletionArchive, 1)
				opts := &skiplock.EnqueueOptions{MaxAttempts: 1, Timeout: 200 * time.Millisecond} // dead: the gate never opens
				args := depArgs{Fail: end == "failed", Gate: end == "dead"}
				if end == "cancelled" || end == "deleted" {
					opts.Queue = "later" // stays queued
				}
				parent := enqueueDep(t, b, args, opts)
				dep := enqueueDep(t, b, depArgs{}, &skiplock.EnqueueOptions{DependsOn: []int64{parent.ID}, OnDependencyFailure: policy})
				require.Equal(t, skiplock.StatusQueued, dep.Status)
				runWorker(t, ws[0])
				finish(t, b, parent.ID)
				if policy == skiplock.CancelDependents {
					waitStatus(t, b, dep.ID, skiplock.StatusCancelled, 10*time.Second, "the dependent was not cancelled")
				} else {
					eventually(t, 10*time.Second, func() bool { return runs(t, b, dep.ID) == 1 },
						"the dependent did not run under RunDependents")
				}
				if end == "deleted" {
					return // a deleted id cannot be attached to
				}
				late, err := b.client.Enqueue(b.ctx, depArgs{}, &skiplock.EnqueueOptions{DependsOn: []int64{parent.ID}, OnDependencyFailure: policy})
				require.NoError(t, err)
				if policy == skiplock.CancelDependents {
					require.Equal(t, skiplock.StatusCancelled, late.Status, "a dependent of an ended parent was not cancelled at once")
					waitStatus(t, b, late.ID, skiplock.StatusCancelled, time.Second, "the cancel was not written")
				} else {
					eventually(t, 10*time.Second, func() bool { return runs(t, b, late.ID) == 1 },
						"the dependent of an ended parent did not run under RunDependents")
				}
			})
		}
	}
}

// Dependents chain: a dependent of a dependent runs after both, and a parent that fails
// cancels the whole chain under the default policy.
func TestDependsOn_Chains(t *testing.T) {
	t.Parallel()
	b, ws, gate := depSetup(t, skiplock.CompletionArchive, 1)
	ok := enqueueDep(t, b, depArgs{Gate: true}, nil)
	okChild := enqueueDep(t, b, depArgs{Of: []int64{ok.ID}}, &skiplock.EnqueueOptions{DependsOn: []int64{ok.ID}})
	okGrandchild := enqueueDep(t, b, depArgs{Of: []int64{okChild.ID}}, &skiplock.EnqueueOptions{DependsOn: []int64{okChild.ID}})
	bad := enqueueDep(t, b, depArgs{}, &skiplock.EnqueueOptions{Queue: "later"})
	badChild := enqueueDep(t, b, depArgs{}, &skiplock.EnqueueOptions{DependsOn: []int64{bad.ID}})
	badGrandchild := enqueueDep(t, b, depArgs{}, &skiplock.EnqueueOptions{DependsOn: []int64{badChild.ID}})
	runWorker(t, ws[0])
	close(gate)
	eventually(t, 10*time.Second, func() bool { return runs(t, b, okGrandchild.ID) == 1 }, "the chain did not run to its end")
	require.Zero(t, ranEarly(t, b, []int64{okChild.ID, okGrandchild.ID}), "a link of the chain ran before the one it waits for")
	_, err := b.client.Cancel(b.ctx, bad.ID)
	require.NoError(t, err)
	waitStatus(t, b, badGrandchild.ID, skiplock.StatusCancelled, 10*time.Second, "the cancel did not reach the end of the chain")
	waitStatus(t, b, badChild.ID, skiplock.StatusCancelled, time.Second, "the first dependent was not cancelled")
}

// An id that is no job fails the enqueue with ErrDependencyNotFound and writes nothing;
// in the caller's transaction the refusal leaves it usable, and a rollback after a
// successful EnqueueTx leaves nothing either (no job, no dependency rows, no mark).
func TestDependsOn_UnknownIDAndRollbackWriteNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	parent, err := b.client.Enqueue(b.ctx, depArgs{}, nil)
	require.NoError(t, err)
	_, err = b.client.Enqueue(b.ctx, depArgs{}, &skiplock.EnqueueOptions{DependsOn: []int64{parent.ID, parent.ID + 1000}})
	require.ErrorIs(t, err, skiplock.ErrDependencyNotFound)
	// One prefix (it read "skiplock: enqueue: skiplock: a job the new job depends on …").
	assert.Equal(t, fmt.Sprintf("skiplock: enqueue: a job the new job depends on does not exist: job ids [%d] are in neither the jobs table nor the archive",
		parent.ID+1000), err.Error())

	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	_, err = b.client.EnqueueTx(b.ctx, tx, depArgs{}, &skiplock.EnqueueOptions{DependsOn: []int64{parent.ID + 1000}})
	require.ErrorIs(t, err, skiplock.ErrDependencyNotFound)
	dep, err := b.client.EnqueueTx(b.ctx, tx, depArgs{}, &skiplock.EnqueueOptions{DependsOn: []int64{parent.ID}})
	require.NoError(t, err, "the refusal left the transaction unusable")
	require.NotZero(t, dep.ID)
	require.NoError(t, tx.Rollback(b.ctx))

	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs`), "jobs were written")
	require.Zero(t, b.count(t, `SELECT (SELECT count(*) FROM {s}.job_waits) + (SELECT count(*) FROM {s}.job_dependencies)
		+ (SELECT count(*) FROM {s}.jobs WHERE metadata ? 'skiplock_dependents')`), "dependency rows or marks were written")

	_, err = b.client.Enqueue(b.ctx, depArgs{}, &skiplock.EnqueueOptions{DependsOn: []int64{parent.ID}, UniqueKey: "k"})
	require.ErrorIs(t, err, skiplock.ErrInvalidOptions)
	_, err = b.client.EnqueueMany(b.ctx, []skiplock.EnqueueParams{{Args: depArgs{}, Options: &skiplock.EnqueueOptions{DependsOn: []int64{parent.ID}}}})
	require.ErrorIs(t, err, skiplock.ErrInvalidOptions)
}

// cancelBefore is the caller's transaction as an enqueue call sees it: it cancels the
// call's context just before the call's statement number at (1 is the first) is sent, as
// a deadline that passes between two of its statements does. pgx then refuses that
// statement without touching the connection, so the transaction lives on.
type cancelBefore struct {
	pgx.Tx
	cancel func()
	at, n  int
}

func (c *cancelBefore) next() {
	if c.n++; c.n == c.at {
		c.cancel()
	}
}

func (c *cancelBefore) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c.next()
	return c.Tx.Exec(ctx, sql, args...)
}

func (c *cancelBefore) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	c.next()
	return c.Tx.Query(ctx, sql, args...)
}

func (c *cancelBefore) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c.next()
	return c.Tx.QueryRow(ctx, sql, args...)
}

// A context that ends between the statements of an enqueue in the caller's transaction
// (DependsOn, a workflow, a sequence: each runs several statements in a savepoint) leaves
// all or nothing in that transaction: an error, and nothing it wrote is left there, or the
// job, and no error; the transaction takes its next statement either way. Before, the
// savepoint was rolled back (or released) with the ended context, which pgx refused to
// send: a DependsOn enqueue whose parents' lock came after the deadline returned an
// error and left its job in the transaction, without its edges, so a commit ran the job
// at once; a workflow whose release came after it returned an error with the workflow
// written.
func TestEnqueueTx_ACtxEndingBetweenItsStatementsWritesAllOrNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	parent, err := b.client.Enqueue(b.ctx, depArgs{}, nil)
	require.NoError(t, err)
	calls := map[string]func(ctx context.Context, tx skiplock.DBTX) error{
		"DependsOn": func(ctx context.Context, tx skiplock.DBTX) error {
			_, err := b.client.EnqueueTx(ctx, tx, depArgs{}, &skiplock.EnqueueOptions{DependsOn: []int64{parent.ID}})
			return err
		},
		"workflow": func(ctx context.Context, tx skiplock.DBTX) error {
			_, err := b.client.EnqueueWorkflowTx(ctx, tx, skiplock.Workflow{Name: "w", Tasks: []skiplock.WorkflowTask{{Name: "a", Args: depArgs{}}}})
			return err
		},
		"sequence": func(ctx context.Context, tx skiplock.DBTX) error {
			_, err := b.client.EnqueueSequenceTx(ctx, tx, "k", depArgs{}, nil)
			return err
		},
	}
	for name, call := range calls {
		for at := 1; at <= 6; at++ {
			tx, err := b.pool.Begin(b.ctx)
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(b.ctx)
			err = call(ctx, &cancelBefore{Tx: tx, cancel: cancel, at: at})
			cancel()
			var jobs int
			require.NoError(t, tx.QueryRow(b.ctx, b.q(`SELECT count(*) FROM {s}.jobs WHERE id <> $1`), parent.ID).Scan(&jobs),
				"%s, cancelled before statement %d: the transaction must take its next statement (enqueue: %v)", name, at, err)
			if err != nil {
				assert.Zero(t, jobs, "%s, cancelled before statement %d: the call failed (%v) but left its job in the transaction", name, at, err)
			} else {
				assert.Equal(t, 1, jobs, "%s, cancelled before statement %d: the call succeeded", name, at)
			}
			require.NoError(t, tx.Rollback(b.ctx))
		}
	}
}

// An enqueue hook hears of a job with DependsOn once its edges are written: a refused
// dependency (an unknown parent) is an error to the hook, with no row, since the insert
// is rolled back; an accepted one is the row. Both with Enqueue and with EnqueueTx.
// Before, the hook heard of the insert before the edges were written, and was told of a
// job that was never there.
func TestDependsOn_HooksHearTheOutcomeWithTheEdges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	hook := &outcomeHook{outcomes: map[string][]skiplock.Outcome{}, statuses: map[string][]skiplock.JobStatus{}, seen: map[string]map[string]string{}}
	client, err := skiplock.NewClient(b.pool, skiplock.Config{Schema: b.schema, Logger: testLogger(), Hooks: []skiplock.Hook{hook}})
	require.NoError(t, err)
	parent, err := client.Enqueue(b.ctx, depArgs{}, &skiplock.EnqueueOptions{Metadata: map[string]string{"case": "parent"}})
	require.NoError(t, err)
	_, err = client.Enqueue(b.ctx, depArgs{}, &skiplock.EnqueueOptions{DependsOn: []int64{987654321}, Metadata: map[string]string{"case": "refused"}})
	require.ErrorIs(t, err, skiplock.ErrDependencyNotFound)
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = client.EnqueueTx(b.ctx, tx, depArgs{}, &skiplock.EnqueueOptions{DependsOn: []int64{987654321}, Metadata: map[string]string{"case": "refused-tx"}})
	require.ErrorIs(t, err, skiplock.ErrDependencyNotFound)
	_, err = client.EnqueueTx(b.ctx, tx, depArgs{}, &skiplock.EnqueueOptions{DependsOn: []int64{parent.ID}, Metadata: map[string]string{"case": "accepted-tx"}})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(b.ctx))
	_, err = client.Enqueue(b.ctx, depArgs{}, &skiplock.EnqueueOptions{DependsOn: []int64{parent.ID}, Metadata: map[string]string{"case": "accepted"}})
	require.NoError(t, err)
	hook.mu.Lock()
	defer hook.mu.Unlock()
	assert.Equal(t, []string{"parent", "accepted-tx", "accepted"}, hook.enqueued, "the enqueues the hook heard of as done")
	assert.Equal(t, 3, hook.rows, "the enqueues the hook got a row for")
	assert.Equal(t, 3, b.count(t, `SELECT count(*) FROM {s}.jobs`))
}

// Dependents attach at random moments while 200 parents run on two workers and finish
// (a third of them wait for two or three parents): every dependent runs exactly once,
// and only after each of its parents' success. The enqueue
// locks the parent's row; without that lock a parent that finished between the enqueue's
// read and its writes left its dependent waiting for ever, and this test times out.
func TestDependsOn_AttachRacingTheParentsOutcome(t *testing.T) {
	t.Parallel()
	forKeepingModes(t, func(t *testing.T, mode skiplock.Completion) {
		const n = 200
		b, ws, _ := depSetup(t, mode, 2)
		parents := make([]int64, n)
		for i := range parents {
			parents[i] = enqueueDep(t, b, depArgs{Work: rand.IntN(20)}, nil).ID
		}
		for _, w := range ws {
			runWorker(t, w)
		}
		deps := make([]int64, n)
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := g; i < n; i += 4 {
					work(b.ctx, time.Duration(rand.IntN(8))*time.Millisecond) // attach at a random moment
					of := []int64{parents[i]}
					if i%3 == 0 { // a third wait for two or three parents, which may finish at once
						of = append(of, parents[rand.IntN(n)], parents[rand.IntN(n)])
					}
					row, err := b.client.Enqueue(b.ctx, depArgs{Of: of}, &skiplock.EnqueueOptions{DependsOn: of})
					if err != nil {
						errs <- err
						return
					}
					deps[i] = row.ID
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		eventually(t, 60*time.Second, func() bool {
			return b.count(t, `SELECT count(DISTINCT job_id) FROM {s}.dep_audit WHERE job_id = ANY ($1)`, deps) == n
		}, "not every dependent ran (%d of %d)", b.count(t, `SELECT count(DISTINCT job_id) FROM {s}.dep_audit WHERE job_id = ANY ($1)`, deps), n)
		holdsFor(t, 200*time.Millisecond, 50*time.Millisecond, func() {
			require.Equal(t, n, b.count(t, `SELECT count(*) FROM {s}.dep_audit WHERE job_id = ANY ($1)`, deps), "a dependent ran twice")
		})
		require.Zero(t, ranEarly(t, b, deps), "a dependent ran before one of its parents' success")
		require.Zero(t, b.count(t, `SELECT (SELECT count(*) FROM {s}.job_waits) + (SELECT count(*) FROM {s}.job_dependencies)`),
			"dependency rows were left behind")
	})
}

// Two outcome transactions settle parents whose dependents cross: C depends on P1 and P4,
// D on P2 and P3; one transaction settles P1 then P2, the other P3 then P4, interleaved.
// Each settlement locks its dependents' job_waits rows until commit, so without one
// order between them the first held C's and wanted D's while the second held D's and
// wanted C's: Postgres broke the deadlock after deadlock_timeout by failing one with
// 40P01. Both commit, and both dependents are released once, after their parents.
func TestDependsOn_CrossingOutcomeTransactionsDoNotDeadlock(t *testing.T) {
	t.Parallel()
	b, _, _ := depSetup(t, skiplock.CompletionKeep, 0)
	var p [5]int64
	for i := 1; i <= 4; i++ {
		p[i] = enqueueDep(t, b, depArgs{}, &skiplock.EnqueueOptions{Queue: "later"}).ID
	}
	c := enqueueDep(t, b, depArgs{}, &skiplock.EnqueueOptions{Queue: "later", DependsOn: []int64{p[1], p[4]}})
	d := enqueueDep(t, b, depArgs{}, &skiplock.EnqueueOptions{Queue: "later", DependsOn: []int64{p[2], p[3]}})
	succeed := b.q(`UPDATE {s}.jobs SET status = 'succeeded', finished_at = now() WHERE id = $1`)

	txA, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = txA.Rollback(b.ctx) }()
	txB, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = txB.Rollback(b.ctx) }()
	var pidB int
	require.NoError(t, txB.QueryRow(b.ctx, `SELECT pg_backend_pid()`).Scan(&pidB))
	exec := func(tx pgx.Tx, id int64) chan error {
		done := make(chan error, 1)
		go func() {
			_, err := tx.Exec(b.ctx, succeed, id)
			done <- err
		}()
		return done
	}
	require.NoError(t, <-exec(txA, p[1]))
	b1 := exec(txB, p[3])
	// B's first settlement has either run (it holds D's wait) or waits for A.
	var b1Err error
	b1Done := false
	eventually(t, 10*time.Second, func() bool {
		select {
		case b1Err = <-b1:
			b1Done = true
			return true
		default:
		}
		return b.count(t, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'`, pidB) == 1
	}, "B's first settlement ran or waits")
	a2 := exec(txA, p[2])
	if b1Done {
		require.NoError(t, b1Err)
		b2 := exec(txB, p[4])
		errA, errB := <-a2, <-b2
		require.NoError(t, errA, "A's second settlement")
		require.NoError(t, errB, "B's second settlement")
	} else {
		require.NoError(t, <-a2, "A's second settlement")
		require.NoError(t, txA.Commit(b.ctx))
		require.NoError(t, <-b1, "B's first settlement")
		require.NoError(t, <-exec(txB, p[4]), "B's second settlement")
	}
	_ = txA.Commit(b.ctx) // no-op when committed above
	require.NoError(t, txB.Commit(b.ctx))
	for _, id := range []int64{c.ID, d.ID} {
		assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE id = $1 AND status = 'queued'
			AND run_at < '9999-01-01'`, id), "dependent %d released", id)
	}
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.job_waits`))
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.job_dependencies`))
}

// A dependent cancelled because its parent died is revived when the parent is requeued,
// and so is a dependent of that dependent: both wait again, then run in order once the
// parent succeeds. A dependent cancelled by two parents stays cancelled.
func TestDependsOn_RequeueOfAParentRevivesTheDependentsItCancelled(t *testing.T) {
	t.Parallel()
	b, ws, _ := depSetup(t, skiplock.CompletionArchive, 1)
	later := &skiplock.EnqueueOptions{Queue: "later"} // no worker: the test writes the parents' outcomes
	parent := enqueueDep(t, b, depArgs{}, later)
	other := enqueueDep(t, b, depArgs{}, later)
	child := enqueueDep(t, b, depArgs{}, &skiplock.EnqueueOptions{DependsOn: []int64{parent.ID}})
	grandchild := enqueueDep(t, b, depArgs{}, &skiplock.EnqueueOptions{DependsOn: []int64{child.ID}})
	twice := enqueueDep(t, b, depArgs{}, &skiplock.EnqueueOptions{DependsOn: []int64{parent.ID, other.ID}})
	end := func(id int64, status skiplock.JobStatus) {
		_, err := b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET status = $2, finished_at = now() WHERE id = $1`), id, string(status))
		require.NoError(t, err)
	}
	end(parent.ID, skiplock.StatusDead)
	end(other.ID, skiplock.StatusFailed)
	for _, id := range []int64{child.ID, grandchild.ID, twice.ID} {
		waitStatus(t, b, id, skiplock.StatusCancelled, time.Second, "the dependent was not cancelled")
	}
	res, err := b.client.Requeue(b.ctx, skiplock.RequeueFilter{IDs: []int64{parent.ID, other.ID}})
	require.NoError(t, err)
	require.Equal(t, int64(2), res.Requeued)
	for _, id := range []int64{child.ID, grandchild.ID} {
		got, err := b.client.Get(b.ctx, id)
		require.NoError(t, err)
		assert.Equal(t, skiplock.StatusQueued, got.Status, "job %d revived", id)
		assert.Equal(t, 9999, got.RunAt.UTC().Year(), "job %d waits again", id)
	}
	waitStatus(t, b, twice.ID, skiplock.StatusCancelled, time.Second, "a dependent cancelled by two parents was revived")
	runWorker(t, ws[0])
	end(parent.ID, skiplock.StatusSucceeded)
	eventually(t, 10*time.Second, func() bool { return runs(t, b, grandchild.ID) == 1 }, "the revived chain did not run")
	assert.Equal(t, 1, runs(t, b, child.ID))
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.dep_audit c JOIN {s}.dep_audit g ON g.job_id = $2
		WHERE c.job_id = $1 AND c.seq < g.seq AND c.finished <= g.started`, child.ID, grandchild.ID), "the grandchild ran after the child")
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.job_waits`))
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.job_dependencies`))
}

// The SQL function's depends_on overload (migration 17) attaches as Go's DependsOn does:
// the job waits for an unfinished parent and runs once it succeeded, a parent that died
// cancels it (or is settled under on_dependency_failure => 'run'), and an unknown id or a
// bad policy fails the call with nothing written.
func TestSQLEnqueue_DependsOn(t *testing.T) {
	t.Parallel()
	b, ws, _ := depSetup(t, skiplock.CompletionArchive, 1)
	later := &skiplock.EnqueueOptions{Queue: "later"}
	parent := enqueueDep(t, b, depArgs{}, later)
	dead := enqueueDep(t, b, depArgs{}, later)
	_, err := b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET status = 'dead', finished_at = now() WHERE id = $1`), dead.ID)
	require.NoError(t, err)

	waiting, dup := mustSQLEnqueue(t, b.ctx, b.pool, b.schema, "dep", `{}`, map[string]any{
		"depends_on": []int64{parent.ID, parent.ID}, "concurrency_keys": `{"region": "eu"}`})
	require.False(t, dup)
	got, err := b.client.Get(b.ctx, waiting)
	require.NoError(t, err)
	assert.Equal(t, 9999, got.RunAt.UTC().Year(), "it waits")
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE id = $1 AND metadata ? 'skiplock_dependents'`, parent.ID), "the parent is marked")
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE id = $1 AND concurrency_keys ->> 'region' = 'eu'`, waiting))

	cancelled, _ := mustSQLEnqueue(t, b.ctx, b.pool, b.schema, "dep", `{}`, map[string]any{"depends_on": []int64{dead.ID}})
	waitStatus(t, b, cancelled, skiplock.StatusCancelled, time.Second, "a dependent of a dead parent was not cancelled")
	settled, _ := mustSQLEnqueue(t, b.ctx, b.pool, b.schema, "dep", `{}`, map[string]any{
		"depends_on": []int64{dead.ID}, "on_dependency_failure": "run"})

	before := b.count(t, `SELECT count(*) FROM {s}.jobs`)
	for name, named := range map[string]map[string]any{
		"unknown id": {"depends_on": []int64{parent.ID, 1 << 40}},
		"bad policy": {"depends_on": []int64{parent.ID}, "on_dependency_failure": "later"},
		"zero id":    {"depends_on": []int64{0}},
		"unique key": {"depends_on": []int64{parent.ID}, "unique_key": "u"},
	} {
		_, _, err := sqlEnqueue(b.ctx, b.pool, b.schema, "dep", `{}`, named)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, name)
		assert.Contains(t, []string{"depends_on", "on_dependency_failure"}, pgErr.ColumnName, name)
	}
	assert.Equal(t, before, b.count(t, `SELECT count(*) FROM {s}.jobs`), "nothing written")

	runWorker(t, ws[0])
	eventually(t, 10*time.Second, func() bool { return runs(t, b, settled) == 1 }, "the dependent did not run under 'run'")
	assert.Zero(t, runs(t, b, waiting), "the dependent ran before its parent")
	_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET status = 'succeeded', finished_at = now() WHERE id = $1`), parent.ID)
	require.NoError(t, err)
	eventually(t, 10*time.Second, func() bool { return runs(t, b, waiting) == 1 }, "the dependent did not run once its parent succeeded")
}

// A job cannot depend on itself: DependsOn holding the id the new job gets (the next
// value of the identity, which a caller can guess) is ErrDependencyNotFound and writes
// nothing, instead of a job waiting for itself for ever.
func TestDependsOn_TheNewJobsOwnIDIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first, err := b.client.Enqueue(b.ctx, depArgs{}, nil)
	require.NoError(t, err)
	// Ids are drawn without gaps here (one client, one statement at a time): the next
	// insert takes first.ID+1.
	_, err = b.client.Enqueue(b.ctx, depArgs{}, &skiplock.EnqueueOptions{DependsOn: []int64{first.ID + 1}})
	require.ErrorIs(t, err, skiplock.ErrDependencyNotFound)
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs`), "nothing was written")
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.job_waits`))
}

// The SQL function's depends_on refuses the new job's own id as Go's DependsOn does: a
// caller that predicts the identity's next value (here the id after the last one) gets
// 23503 on depends_on with nothing written, not a job that waits for itself for ever.
func TestSQLEnqueue_DependsOnTheNewJobsOwnIDIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first, _ := mustSQLEnqueue(t, b.ctx, b.pool, b.schema, "dep", `{}`, nil)
	// Ids are drawn without gaps here (one caller, one statement at a time): the next
	// insert takes first+1.
	_, _, err := sqlEnqueue(b.ctx, b.pool, b.schema, "dep", `{}`, map[string]any{"depends_on": []int64{first + 1}})
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr, "the job would wait for itself")
	assert.Equal(t, "23503", pgErr.Code)
	assert.Equal(t, "depends_on", pgErr.ColumnName)
	assert.Contains(t, pgErr.Message, "own id")
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs`), "nothing was written")
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.job_waits`))
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.job_dependencies`))
}
