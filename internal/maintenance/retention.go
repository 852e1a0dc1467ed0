// This file holds the sweeper's retention: which finished jobs each purge pass deletes
// (the default rule, each queue's and each kind's), and the bounded batches that delete
// them. sweeper.go runs the passes after each sweep's reclaim.

package maintenance

import (
	"context"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/ownership"
)

// retentionRule names the jobs a retention applies to: one queue's, one kind's, or (the
// zero value) all the others.
type retentionRule struct{ queue, kind string }

// SetQueueRetention sets (d > 0) or removes (d == 0) the retention of one queue's jobs,
// from the next sweep on (a queue added to a running worker, Worker.AddQueue).
func (s *Sweeper) SetQueueRetention(queue string, d time.Duration) {
	s.rulesMu.Lock()
	defer s.rulesMu.Unlock()
	r := retentionRule{queue: queue}
	if d > 0 {
		s.rules[r] = d
	} else {
		delete(s.rules, r)
	}
	delete(s.purged, r)
	delete(s.purged, retentionRule{}) // the default's exclusions changed: walk it again
}

// purgePass is one retention rule's purge: its arguments to purgeArchiveSQL.
type purgePass struct {
	rule                retentionRule
	keep                time.Duration
	from                time.Time // $3
	queue, kind         *string   // $4, $5: NULL matches any
	notQueues, notKinds []string  // $6, $7
}

// purgePasses lists the purges of one sweep: one per queue rule, one per kind rule and
// the default, each excluding the jobs a more specific rule covers (a kind's rule over
// its queue's, both over the default).
func (s *Sweeper) purgePasses() []purgePass {
	s.rulesMu.Lock()
	defer s.rulesMu.Unlock()
	if now := time.Now(); now.After(s.rescanAt) {
		clear(s.purged)
		s.rescanAt = now.Add(purgeRescanEvery)
	}
	// Empty, not nil: pgx sends a nil slice as NULL, and x <> ALL (NULL) is never true.
	queues, kinds := []string{}, []string{}
	for r := range s.rules {
		if r.kind != "" {
			kinds = append(kinds, r.kind)
		} else {
			queues = append(queues, r.queue)
		}
	}
	passes := []purgePass{{keep: s.cfg.ArchiveRetention, from: s.purged[retentionRule{}], notQueues: queues, notKinds: kinds}}
	for r, d := range s.rules {
		p := purgePass{rule: r, keep: d, from: s.purged[r], notQueues: []string{}, notKinds: []string{}}
		if r.kind != "" {
			p.kind = &r.kind
		} else {
			p.queue, p.notKinds = &r.queue, kinds
		}
		passes = append(passes, p)
	}
	return passes
}

// purgedUpTo records that the archive holds no row of rule's jobs finished before
// cutoff (the database's now() minus the rule's retention): the rule's next purges start
// purgeMargin before it.
func (s *Sweeper) purgedUpTo(rule retentionRule, cutoff time.Time) {
	s.rulesMu.Lock()
	defer s.rulesMu.Unlock()
	s.purged[rule] = cutoff.Add(-purgeMargin)
}

// purgeRescanEvery is how often the purges walk the whole archive again rather than
// from where they last ended: a row the sweeper would otherwise never see again (its
// finished_at written back by hand, or a rule changed) is deleted within this long. A
// whole walk of a 1,000,000-row archive is measured in docs/operating.md "Retention per queue and
// kind".
const purgeRescanEvery = time.Hour

// purgeMargin is how far before the last cutoff a rule's next purge starts: a row's
// finished_at is its transaction's now(), and a success batch commits at most its 30 s
// timeout after it, so a row may appear behind a cutoff already passed.
const purgeMargin = 5 * time.Minute

// PurgeArchiveSQL deletes one batch of one retention rule's finished jobs past their
// retention $1, from the archive and (kept or cancelled jobs) from the hot table. Each
// DELETE takes its batch's ids as an array (id = ANY (ARRAY(...))), found once and then
// reached through the primary key: with id IN (SELECT ... LIMIT), statistics that said
// the table was empty made the planner rescan the whole table for every one of its rows.
// k deletes the keys of coalesced enqueues (internal/enqueue, coalesce.go) older than $8
// (enqueueKeyRetention); the second column counts them, apart from the jobs. The third
// is the cutoff, now() - $1.
//
//   - The rule: $4 the queue, $5 the kind (NULL: any); $6 and $7 the queues and kinds that
//     rules of their own cover, left to those.
//   - finished_at >= $3: where the rule's last complete purge ended (purgeMargin before
//     its cutoff). The archive has no index by queue or kind, only the BRIN index on
//     finished_at (rows arrive in that order); with both bounds it reads only the pages
//     finished since the last purge. Without the lower bound, a queue kept 1 h while the
//     rest is kept 7 days made every sweep read every row finished in between, to find
//     the few of that queue: measured on a 1,000,000-row archive (docs/operating.md "Retention per
//     queue and kind"). The first purge of a sweeper walks from the beginning, once.
//   - The hot table's DELETE checks the status and the end again on the row it deletes: a
//     cancelled job put back in the queue after this statement's snapshot (RetryWorkflow,
//     or a Requeue reviving the dependents a parent cancelled), committed while the
//     DELETE waited on its row lock, is queued by then, and stays.
//   - A job cancelled while its handler ran stays while that attempt is open
//     (ownership.CancelledAttemptOpen): a sequence task's job deleted then left its task
//     released for ever, and the key's next job waiting, whatever the retention.
const PurgeArchiveSQL = `WITH a AS (
	DELETE FROM {s}.jobs_archive WHERE id = ANY (ARRAY(
		SELECT id FROM {s}.jobs_archive
		WHERE finished_at >= $3 AND finished_at < now() - $1::interval
			AND ($4::text IS NULL OR queue = $4) AND ($5::text IS NULL OR kind = $5)
			AND queue <> ALL ($6::text[]) AND kind <> ALL ($7::text[])
		LIMIT $2))
	RETURNING 1
), h AS (
	DELETE FROM {s}.jobs WHERE id = ANY (ARRAY(
		SELECT id FROM {s}.jobs
		WHERE status IN ('succeeded', 'cancelled') AND finished_at < now() - $1::interval
			AND NOT ` + ownership.CancelledAttemptOpen + `
			AND ($4::text IS NULL OR queue = $4) AND ($5::text IS NULL OR kind = $5)
			AND queue <> ALL ($6::text[]) AND kind <> ALL ($7::text[])
		LIMIT $2))
		AND status IN ('succeeded', 'cancelled') AND finished_at < now() - $1::interval
		AND NOT ` + ownership.CancelledAttemptOpen + `
	RETURNING 1
), k AS (
	DELETE FROM {s}.enqueue_batches WHERE key = ANY (ARRAY(
		SELECT key FROM {s}.enqueue_batches WHERE created_at < now() - $8::interval LIMIT $2))
	RETURNING 1
)
SELECT (SELECT count(*) FROM a) + (SELECT count(*) FROM h), (SELECT count(*) FROM k), now() - $1::interval`

// EnqueueKeyRetention is how long the key of a coalesced enqueue statement is kept: it is
// needed only while the statement may be sent again, at most coalesceTimeout.
const EnqueueKeyRetention = 10 * time.Minute

// summarizeArchiveSQL summarizes the page ranges of the archive's BRIN index on
// finished_at ($1, the index's qualified name) that were filled since its last summary.
// A range not summarized is read whole by every scan by finished_at, and nothing but a
// VACUUM of the archive summarizes it: with autovacuum off (or behind on an insert-only
// table) the purge and the timing rollup read the whole archive. bench -scale archive
// measured a purge of a 10^7-row archive reading all 213,704 pages (2.1 s) where the
// summarized index read a few (0.2 ms), and at 10^8 rows every sweep's purge ran into its
// statement timeout. It reads only the new ranges' pages, which the archive moves have
// just written.
const summarizeArchiveSQL = `SELECT brin_summarize_new_values(to_regclass($1))`

// summarizeTimeout bounds one summary. It is not the sweep's statement timeout: a
// summary cut short leaves a placeholder in the range it was working on, and a scan then
// treated every range after it as a match (measured at 10^8 rows: a 10-minute window
// read 1,039,573 pages, 6.1 s; 2,432 pages, 25 ms, once that range was summarized again).
// The first summary of a big unsummarized archive takes about 16 s per 10^8 rows; the
// ones after it read only the pages archived since the last sweep.
const summarizeTimeout = 15 * time.Minute

// summarizeArchive runs summarizeArchiveSQL under the sweep lock, in a transaction of its
// own bounded by summarizeTimeout (its statement too). It needs the index's owner; an
// error (a worker role that does not own it, a lock held by a VACUUM of the archive) is
// logged and the sweep goes on.
func (s *Sweeper) summarizeArchive(ctx context.Context) {
	index := pgx.Identifier{s.db.Schema, "jobs_archive_finished_idx"}.Sanitize()
	_, err := s.underSweepLockFor(ctx, summarizeTimeout, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = "+strconv.FormatInt(summarizeTimeout.Milliseconds(), 10)); err != nil {
			return err
		}
		var ranges *int64
		return tx.QueryRow(ctx, summarizeArchiveSQL, index).Scan(&ranges)
	})
	if err != nil && ctx.Err() == nil {
		s.logger.Debug("skiplock: summarizing the archive's finished_at index failed; the purge reads unsummarized ranges whole", "err", err)
	}
}

// purgeExpired deletes finished jobs past retention, pass by pass (purgePasses), in at
// most maxPurgeBatches batches in all, adding the count to res.
func (s *Sweeper) purgeExpired(ctx context.Context, res *jobtype.SweepResult) error {
	batches := 0
	for _, p := range s.purgePasses() {
		for ; batches < maxPurgeBatches; batches++ {
			n, done, err := s.purgeBatch(ctx, p)
			if err != nil {
				return s.db.WrapErr("sweep: purge", err)
			}
			res.Purged += n
			if done {
				break
			}
		}
	}
	return nil
}

// purgeBatch deletes one batch of p's jobs past retention (and of old enqueue keys), in
// a transaction of its own holding the sweep lock, and reports whether p is done: the
// lock was taken by another sweeper, or neither the batch of jobs nor that of old
// enqueue keys, which goes along with every batch, was full.
func (s *Sweeper) purgeBatch(ctx context.Context, p purgePass) (n int64, done bool, err error) {
	var keys int64
	var cutoff time.Time
	got, err := s.underSweepLock(ctx, func(ctx context.Context, tx pgx.Tx) error {
		return tx.QueryRow(ctx, s.sql.purgeArchive, p.keep, s.cfg.BatchSize, p.from, p.queue, p.kind,
			p.notQueues, p.notKinds, EnqueueKeyRetention).Scan(&n, &keys, &cutoff)
	})
	if err != nil || !got {
		return 0, true, err
	}
	if n < int64(s.cfg.BatchSize) {
		s.purgedUpTo(p.rule, cutoff)
	}
	return n, n < int64(s.cfg.BatchSize) && keys < int64(s.cfg.BatchSize), nil
}
