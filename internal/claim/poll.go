// This file holds the fallback poll: one statement that asks, for all of a worker's
// queues at once, which are paused and which have due jobs, and wakes the claim loops
// (claimloop.go) of those that do.

package claim

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/pgutil"
)

// pollSQL is the fallback poll: for each of the worker's queues in $1 it returns whether
// the queue is paused and, for those whose flag in $2 (the same length, in the same
// order) is true and that are not paused, whether it has at least one job due now. One
// statement for all of a worker's queues, however many, so an idle worker costs the
// database one statement per poll interval, not one per queue; it also refreshes the
// paused flags, which a control notification may have missed.
//
//   - The flags come beside the names (unnest of two arrays), not as a second list of
//     names tested with = ANY: that test walks the list for every queue, and at 10,000
//     queues it was 10^8 text comparisons a poll, 0.4 cores of the server for an idle
//     worker.
//   - The LEFT JOIN on queues (its primary key) reads the pause of each queue.
//   - CASE evaluates the due check only for flagged queues (the ones that could claim
//     now) that are not paused: CASE, unlike AND, fixes the order of evaluation.
//   - Per queue, prios walks the distinct priorities of its queued jobs, highest first,
//     with the claims' walk (prioritiesCTE, for q.name): one seek of jobs_claim_idx per
//     priority, which comes back with the priority's first queued job in claim order
//     (earliest run_at first). That job answers the due check itself: if it is not due,
//     no job of its priority is. So the poll steps over the entries of the jobs claimed
//     since the last vacuum once, in the seek, as the claims do; and jobs scheduled for
//     later are never walked over. (attempts >= 0 keeps the seeks plain index scans, which
//     mark dead entries as claimSQL's comment says.)
//   - EXISTS stops at the first due job found: the recursion goes no further than the
//     first priority that has one, and a queue with no queued job costs one index seek.
//   - It only reads; it locks nothing. The claim loops it wakes take the jobs.
var pollSQL = `SELECT q.name, p.name IS NOT NULL AS paused,
	CASE WHEN p.name IS NULL AND q.candidate THEN EXISTS (
		WITH RECURSIVE ` + prioritiesCTE("q.name") + `
		SELECT 1 FROM prios f WHERE f.run_at <= now()
	) ELSE false END AS due
FROM unnest($1::text[], $2::boolean[]) AS q(name, candidate)
LEFT JOIN {s}.queues p ON p.name = q.name AND p.paused_at IS NOT NULL`

// pollTimeout bounds one fallback poll.
const pollTimeout = 10 * time.Second

// Poller is a worker's fallback poll. Every interval — and at once when kicked, as the
// listener does after each (re)connect, when notifications may have been lost — it asks
// with one statement which of the worker's queues are paused and which have due jobs,
// hands the paused flags to the pauseWatcher and signals the claim loops of the due
// queues. Notifications are the main path; the poll covers what they miss: notifications
// and control messages sent while nobody listened, and scheduled, retried and reclaimed
// jobs, which send none.
type Poller struct {
	pool     *pgxpool.Pool
	Sql      string // pollSQL, rendered
	interval time.Duration
	queues   *QueueSet     // read at each poll: queues are added and removed at run time
	pause    *PauseWatcher // nil: paused flags are not kept
	logger   *slog.Logger
	kicks    chan struct{}
	wrapErr  func(op string, err error) error
}

func NewPoller(db pgutil.DB, interval time.Duration, queues *QueueSet, pause *PauseWatcher, logger *slog.Logger) *Poller {
	return &Poller{
		pool: db.Pool, Sql: db.Render(pollSQL), interval: interval,
		queues: queues, pause: pause, logger: logger, kicks: make(chan struct{}, 1), wrapErr: db.WrapErr,
	}
}

// Kick makes the poller poll now; kicks coalesce.
func (p *Poller) Kick() {
	select {
	case p.kicks <- struct{}{}:
	default:
	}
}

// Run polls at once, then every interval (with a little jitter, so that workers started
// together do not poll in step) and whenever kicked, until ctx ends.
func (p *Poller) Run(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-p.kicks:
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
		}
		if err := p.poll(ctx); err != nil && ctx.Err() == nil {
			p.logger.Warn("skiplock: poll failed; trying again at the next poll", "err", err)
		}
		t.Reset(p.interval - p.interval/10 + rand.N(p.interval/5+1))
	}
}

// poll refreshes the paused flags and signals the claim loops of every queue that has due
// jobs. It asks about due jobs only for the queues that could claim and would not be
// woken anyway: a queue with no free slot cannot claim, and one whose last claim filled
// its batch is woken by each finished job.
func (p *Poller) poll(ctx context.Context) error {
	queues := p.queues.All()
	names := make([]string, len(queues))
	candidates := make([]bool, len(queues))
	for i, q := range queues {
		names[i] = q.name
		candidates[i] = q.active.Load() < q.Max.Load() && !q.more.Load() // without a backlog a queue does not claim ahead: held() is Max
	}
	var gen uint64
	if p.pause != nil {
		gen = p.pause.gen.Load()
	}
	cctx, cancel := context.WithTimeout(ctx, pollTimeout)
	defer cancel()
	rows, err := p.pool.Query(cctx, p.Sql, names, candidates)
	if err != nil {
		return p.wrapErr("poll", err)
	}
	var (
		name        string
		paused, due bool
		pausedNow   = map[string]bool{}
		dueNow      []*QueueRunner
	)
	_, err = pgx.ForEachRow(rows, []any{&name, &paused, &due}, func() error {
		pausedNow[name] = paused
		if q := p.queues.Get(name); q != nil && due {
			dueNow = append(dueNow, q)
		}
		return nil
	})
	if err != nil {
		return p.wrapErr("poll", err)
	}
	// A control message applied while the statement ran is newer than what it read.
	if p.pause != nil && p.pause.gen.Load() == gen {
		for _, q := range queues {
			p.pause.set(q, pausedNow[q.name])
		}
	}
	for _, q := range dueNow {
		if !q.paused.Load() {
			q.Signal()
		}
	}
	return nil
}
