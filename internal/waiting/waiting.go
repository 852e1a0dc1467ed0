// Package waiting holds the engine of Client.Wait and Client.WaitWorkflow: a waiter
// listens on the schema's done channel, registers the jobs it waits for in job_waiters,
// then reads their state, and reads again on each notification about them or, failing
// one, every poll interval. The other side is the wake-up (WakeSQL) that the success and
// failure batches run in their transaction, sent with their statement in one round trip
// (ExecWaking, QueryWaking).
//
// Why nothing is missed: the waiter commits its job_waiters row before it reads the job,
// and reads a running job with FOR SHARE. A batch writes the job's row (a running one:
// outcomes are fenced on it) first and reads job_waiters in a later statement of its
// transaction, with a newer snapshot. Either that snapshot sees the waiter's row (the
// notification is sent at the batch's commit, and the waiter, listening since before it
// registered, receives it), or the batch wrote the row before the waiter registered: then
// the waiter's read comes after the batch's write, sees the job still running (the write
// is not committed), waits for the row's lock until the batch ends, and sees what it
// committed.
package waiting

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/pgutil"
)

// Channel is the channel the wake-ups of schema's waited jobs are sent on; the payload is
// the job's id.
func Channel(schema string) string { return schema + "_done" }

// WakeSQL notifies the waiters of the jobs $1 (ids) on channel $2. It reads job_waiters
// only: empty when nobody waits, it costs a scan of no pages. A notification for a job
// whose attempt was stale (its row not written) only makes its waiter read it again.
// Postgres sends one notification per id in a transaction, however many waiters.
const WakeSQL = `SELECT pg_notify($2, job_id::text) FROM {s}.job_waiters WHERE job_id = ANY($1)`

// batcher is what ExecWaking needs of a pool or a transaction.
type batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Waking sends the wake-ups of a schema's batches: its rendered WakeSQL and channel.
type Waking struct {
	sql, channel string
	// settings runs first in a batch sent on a pool (WithPlanSettings); "" for none.
	settings string
}

// WithPlanSettings returns w whose batches, when sent on a pool (each batch then its own
// transaction), run pgutil.PlanSettingsSQL first: their statements run one cached plan
// per connection, made with sequential scans costed out. In a transaction (a caller's,
// or one with the workflow settle statement) they run without it.
func (w Waking) WithPlanSettings() Waking {
	w.settings = pgutil.PlanSettingsSQL
	return w
}

// NewWaking returns the wake-ups of schema.
func NewWaking(schema string) Waking {
	return Waking{sql: pgutil.Render(schema, WakeSQL), channel: Channel(schema)}
}

// Notify runs the wake-up of ids through db: inside a transaction, after its writes to
// the jobs (a statement of its own, see the package's documentation).
func (w Waking) Notify(ctx context.Context, db jobtype.DBTX, ids []int64) error {
	_, err := db.Exec(ctx, w.sql, pgutil.Int8ArrayText(ids), w.channel)
	return err
}

// Exec runs q with args and then the wake-up of ids, in one round trip and one
// transaction (a pipeline ends with one Sync: its statements form an implicit
// transaction, or run in db's own), and returns q's command tag. The wake-up runs as a
// statement of its own so that it reads job_waiters with a snapshot newer than q's
// writes (see the package's documentation). ids is the ids' bigint[] parameter,
// pgutil.Int8ArrayText's: q's own, when q takes the same ids, is encoded once.
func (w Waking) Exec(ctx context.Context, db jobtype.DBTX, q string, args []any, ids any) (pgconn.CommandTag, error) {
	var tag pgconn.CommandTag
	err := w.Query(ctx, db, q, args, ids, func(rows pgx.Rows) error {
		for rows.Next() {
		}
		tag = rows.CommandTag()
		return rows.Err()
	})
	return tag, err
}

// Query is Exec for a statement whose rows read reads (it must read them all).
func (w Waking) Query(ctx context.Context, db jobtype.DBTX, q string, args []any, ids any, read func(pgx.Rows) error) error {
	bdb, ok := db.(batcher)
	if !ok {
		rows, err := db.Query(ctx, q, args...)
		if err != nil {
			return err
		}
		if err := read(rows); err != nil {
			rows.Close()
			return err
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		_, err = db.Exec(ctx, w.sql, ids, w.channel)
		return err
	}
	b := &pgx.Batch{}
	_, onPool := db.(*pgxpool.Pool)
	settings := onPool && w.settings != ""
	if settings {
		b.Queue(w.settings)
	}
	b.Queue(q, args...)
	b.Queue(w.sql, ids, w.channel)
	br := bdb.SendBatch(ctx, b)
	var err error
	if settings {
		_, err = br.Exec()
	}
	if err == nil {
		var rows pgx.Rows
		if rows, err = br.Query(); err == nil {
			err = read(rows)
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
	}
	if err == nil {
		_, err = br.Exec()
	}
	return errors.Join(err, br.Close())
}

// Check reads what a waiter waits for, on conn: the job ids it must be registered for
// (all of them, registered or not), and whether the wait is over.
type Check func(ctx context.Context, conn *pgx.Conn) (ids []int64, done bool, err error)

// Waiter waits on one pool's connections.
type Waiter struct {
	Pool   *pgxpool.Pool
	Schema string
	// Poll is how long a wait goes without a notification before it reads again.
	Poll time.Duration
	// Refresh is how often a wait refreshes its job_waiters rows; zero: RefreshEvery.
	Refresh time.Duration
}

// The refresh of a wait's rows, which keeps the sweeper from pruning them.
const (
	// RefreshEvery is how often a wait writes now() into its rows' since (refreshSQL),
	// putting back any that are missing.
	RefreshEvery = time.Minute
	// StaleAfter is how old a row's since is when the sweeper prunes it as a leftover of
	// a wait that was cut off before its cleanup could remove it (internal/maintenance,
	// waiterretention.go). A live wait refreshes its rows every RefreshEvery, between two
	// of its statements: its rows grow this old only while one statement of its own has
	// been stuck for most of an hour, and that wait puts them back before its next read.
	StaleAfter = time.Hour
)

// The statements of a wait.
const (
	// registerSQL registers waiter $2 for the jobs $1 (again: a row already there stays).
	registerSQL = `INSERT INTO {s}.job_waiters (job_id, waiter) SELECT unnest($1::bigint[]), $2
	ON CONFLICT DO NOTHING`
	// unregisterSQL removes waiter $1's rows when it returns.
	unregisterSQL = `DELETE FROM {s}.job_waiters WHERE waiter = $1`
	// refreshSQL refreshes waiter $2's rows for the jobs $1, and puts back those the
	// sweeper pruned (after a wait stuck in a statement for StaleAfter).
	refreshSQL = `INSERT INTO {s}.job_waiters (job_id, waiter) SELECT unnest($1::bigint[]), $2
	ON CONFLICT (job_id, waiter) DO UPDATE SET since = now()`
)

// Wait holds one connection of the pool while it waits: it listens on the done channel,
// then, each round, registers the ids check last returned that are not registered yet
// and runs check again at once; with every id registered, it refreshes its rows when
// Refresh has passed since it last did (and runs check again at once: a row the sweeper
// pruned is back before that read), else waits for a notification about one of them, for
// Poll, or until the refresh is due, and runs check again. It returns when check says
// done, returns an error, or ctx ends (ctx.Err()). Its rows and its LISTEN are removed
// before the connection goes back to the pool.
func (w *Waiter) Wait(ctx context.Context, check Check) (err error) {
	conn, err := w.Pool.Acquire(ctx)
	if err != nil {
		return err
	}
	me := waiterNumber()
	defer func() { w.cleanup(ctx, conn, me) }()
	channel := pgx.Identifier{Channel(w.Schema)}.Sanitize()
	if _, err := conn.Exec(ctx, "LISTEN "+channel); err != nil {
		return err
	}
	every := w.Refresh
	if every <= 0 {
		every = RefreshEvery
	}
	registered := map[int64]bool{}
	refreshed := time.Now() // the first registration writes since
	for {
		ids, done, err := check(ctx, conn.Conn())
		if err != nil || done {
			return err
		}
		var fresh []int64
		for _, id := range ids {
			if !registered[id] {
				fresh = append(fresh, id)
			}
		}
		if len(fresh) > 0 {
			// Registered before the next read: the read after it cannot miss an outcome.
			if _, err := conn.Exec(ctx, pgutil.Render(w.Schema, registerSQL), fresh, me); err != nil {
				return err
			}
			for _, id := range fresh {
				registered[id] = true
			}
			continue
		}
		if time.Since(refreshed) >= every {
			all := make([]int64, 0, len(registered))
			for id := range registered {
				all = append(all, id)
			}
			if _, err := conn.Exec(ctx, pgutil.Render(w.Schema, refreshSQL), all, me); err != nil {
				return err
			}
			refreshed = time.Now()
			continue // read again: a row put back here may have missed an outcome
		}
		if err := w.await(ctx, conn.Conn(), registered, refreshed.Add(every)); err != nil {
			return err
		}
	}
}

// await returns when a notification about one of ids comes, or Poll has passed, or at
// refresh (the zero time: no bound), whichever is first; with ctx's error when ctx ends. It ends the read by setting the connection's read deadline
// to now, from a timer when the poll is due and when ctx ends, not with a context given
// to the read: that would depend on the pool's context watcher (a
// CancelRequestContextWatcherHandler sends the server a cancel request each time). Set
// when the poll is due rather than ahead of the read, the deadline ends the read even if
// something cleared it meanwhile.
func (w *Waiter) await(ctx context.Context, conn *pgx.Conn, ids map[int64]bool, refresh time.Time) error {
	poll := w.Poll
	if poll <= 0 {
		poll = time.Second
	}
	if !refresh.IsZero() {
		poll = max(min(poll, time.Until(refresh)), 0)
	}
	nc := conn.PgConn().Conn()
	var mu sync.Mutex
	active := true
	interrupt := func() {
		mu.Lock()
		defer mu.Unlock()
		if active {
			_ = nc.SetReadDeadline(time.Now()) // ends the read at once
		}
	}
	timer := time.AfterFunc(poll, interrupt) // ctx's deadline, if sooner, ends ctx
	stop := context.AfterFunc(ctx, interrupt)
	defer func() {
		timer.Stop()
		stop()
		mu.Lock()
		active = false
		_ = nc.SetReadDeadline(time.Time{})
		mu.Unlock()
	}()
	for {
		n, err := conn.WaitForNotification(context.Background())
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var netErr net.Error
		if errors.As(err, &netErr) && netErr.Timeout() {
			return nil // the poll
		}
		if err != nil {
			return err
		}
		if id, perr := strconv.ParseInt(n.Payload, 10, 64); perr == nil && ids[id] {
			return nil
		}
	}
}

// The limits of a waiter's cleanup.
const (
	// cleanupTimeout bounds the cleanup of a wait that ended on its own (done, or an
	// error), while its caller's ctx still runs.
	cleanupTimeout = 5 * time.Second
	// lateCleanupTimeout bounds the cleanup of a wait whose ctx has ended: Wait owes its
	// caller a prompt return, and a reachable database removes the rows in about a
	// millisecond. On a silent path (a black hole, a dead NAT entry) the statement would
	// wait out cleanupTimeout: the rows stay behind instead (see cleanup).
	lateCleanupTimeout = 500 * time.Millisecond
)

// cleanup removes waiter me's rows and the LISTEN, drops the notifications left on conn,
// and gives conn back to the pool; a connection that fails any of it is closed instead.
// It runs in Wait's goroutine, within cleanupTimeout, or lateCleanupTimeout when ctx
// has ended, so Wait returns at most that long after ctx ends. The bound is set on the
// connection itself too: it holds whatever the pool's context watcher does with a
// cancelled context. Rows it could not remove in time stay in job_waiters until the
// sweeper prunes them, StaleAfter after their last refresh. Meanwhile they are
// harmless: a row without its waiter only makes the batch that records its job's
// outcome send one notification nobody waits for.
func (w *Waiter) cleanup(ctx context.Context, conn *pgxpool.Conn, me int64) {
	limit := cleanupTimeout
	if ctx.Err() != nil {
		limit = lateCleanupTimeout
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), limit)
	defer cancel()
	c := conn.Conn()
	ok := !c.IsClosed()
	var db interface {
		Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
	} = c
	if ok {
		// Cleared below before the connection goes back; a statement it ends closes
		// the connection (pgconn does, on a failed read).
		_ = c.PgConn().Conn().SetDeadline(time.Now().Add(limit))
	} else {
		db = w.Pool // the rows must go all the same
	}
	if _, err := db.Exec(cctx, pgutil.Render(w.Schema, unregisterSQL), me); err != nil {
		ok = false
	}
	if ok {
		_, err := c.Exec(cctx, "UNLISTEN *")
		ok = err == nil
	}
	if ok {
		// Notifications received before the UNLISTEN wait in the connection's buffer:
		// read them, so the pool's next user of it never sees them.
		done, stop := context.WithCancel(cctx)
		stop()
		for {
			if _, err := c.WaitForNotification(done); err != nil {
				break
			}
		}
		ok = c.PgConn().Conn().SetDeadline(time.Time{}) == nil
	}
	if !ok && !c.IsClosed() {
		_ = c.Close(cctx)
	}
	conn.Release()
}

// waiterNumber returns a random positive number for one waiting call: unique enough
// across processes for job_waiters' key, whose only use is to let each call remove its
// own rows.
func waiterNumber() int64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return int64(binary.BigEndian.Uint64(b[:]) >> 1)
}

// The statements of Client.Wait's read of a job.
const (
	// jobSQL reads job $1, without a lock.
	jobSQL = `SELECT ` + jobtype.Columns + ` FROM {s}.jobs WHERE id = $1`
	// lockedJobSQL reads running job $1 again, FOR SHARE: it waits for a batch that has
	// written the row and not committed yet (see the package's documentation), then
	// reads what it committed. Only a running job's outcome is written by a batch, and a
	// queued job is not locked: a claim would pass over it (SKIP LOCKED).
	lockedJobSQL = jobSQL + ` AND status = 'running' FOR SHARE`
	// archiveSQL reads job $1 from the archive, in a statement of its own: after the
	// jobs table had no row, its snapshot sees a move to the archive that committed while
	// lockedJobSQL waited.
	archiveSQL = `SELECT ` + jobtype.ArchiveColumns + ` FROM {s}.jobs_archive WHERE id = $1`
)

// ReadJob reads job id on conn for a waiter: from the jobs table (a running job with
// lockedJobSQL), else the archive; pgx.ErrNoRows when neither has it.
func ReadJob(ctx context.Context, conn *pgx.Conn, schema string, id int64) (*jobtype.JobRow, error) {
	row, err := jobtype.ScanJob(conn.QueryRow(ctx, pgutil.Render(schema, jobSQL), id))
	if err == nil && row.Status == jobtype.StatusRunning {
		// FOR SHARE follows the row to its latest version: no row if it left the table
		// or stopped running meanwhile; read it again then.
		row, err = jobtype.ScanJob(conn.QueryRow(ctx, pgutil.Render(schema, lockedJobSQL), id))
		if errors.Is(err, pgx.ErrNoRows) {
			row, err = jobtype.ScanJob(conn.QueryRow(ctx, pgutil.Render(schema, jobSQL), id))
		}
	}
	if errors.Is(err, pgx.ErrNoRows) {
		row, err = jobtype.ScanJob(conn.QueryRow(ctx, pgutil.Render(schema, archiveSQL), id))
	}
	return row, err
}

// Final reports whether a job in status s is done: it runs no more unless an operator
// requeues it.
func Final(s jobtype.JobStatus) bool {
	return s == jobtype.StatusSucceeded || s == jobtype.StatusFailed || s == jobtype.StatusDead || s == jobtype.StatusCancelled
}
