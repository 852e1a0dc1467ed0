// This file holds the claim of a queue with per-dimension limits (QueueLimits.ConcurrencyKeys):
// a job carries keys in several dimensions (EnqueueOptions.ConcurrencyKeys) and starts only
// when every one of them is under its dimension's limit. It is a variant of the lock path's
// pick (flowclaim.go): the same statement, under the same claim lock, whose last step
// checks each job's keys. Queues without such limits never run it.

package claim

import (
	"maps"
	"strconv"
	"strings"

	"github.com/skiplock/skiplock/internal/jobtype"
)

// DimLookahead is how many queued jobs a claim of a queue with per-dimension limits looks
// through beyond what it may take (per partition key on the keyed path): jobs whose keys
// are full are passed over, and the jobs behind them are taken instead, up to this many.
const DimLookahead = 64

// dimKeysSQL is a job's keys in the limited dimensions ($DIMS), as "dimension<US>key"
// strings (US: the unit separator, chr(31), which no dimension name holds); an empty
// array when it has none.
const dimKeysSQL = `coalesce((SELECT array_agg(e.key || chr(31) || e.value)
	FROM jsonb_each_text(concurrency_keys) e WHERE e.key = ANY ($DIMS::text[])), '{}')`

// dimPlainCandSQL is the candidates of a limited queue without partition keys: claimSQL's
// walk (priority by priority, due jobs only), without locks, cut at the budget plus
// DimLookahead, each with its keys. It follows flowPrefixSQL, which begins WITH RECURSIVE.
var dimPlainCandSQL = `, ` + prioritiesCTE("$1") + `, cand AS MATERIALIZED (
	SELECT c.ctid, c.keys, row_number() OVER () AS ord FROM (
		SELECT c.ctid, c.keys FROM prios p CROSS JOIN LATERAL (
			` + dueScan(`ctid, `+dimKeysSQL+` AS keys`, `(SELECT n FROM budget) + $LOOK`, false) + `
		) c
		WHERE (SELECT n FROM budget) > 0
		LIMIT (SELECT n FROM budget) + $LOOK
	) c
), part_lim AS (
	SELECT NULL::text AS k, NULL::int AS free WHERE false
), cursor AS (
	SELECT NULL::text AS k
)`

// dimKeyedCandSQL is the candidates of a keyed queue (per-key limit, per-key rate or fair
// sharing), after flowKeyedPickSQL's walk up to its slots: the jobs nokey locked, and
// each ready key's jobs in its claim order, its share plus DimLookahead, without locks.
// Each candidate also carries its partition key as one more key (RS, chr(30), before it:
// no dimension key starts so), whose room (part_lim) is its free slots and share, so that
// passing over a job does not let its key take more than flowKeyedPickSQL would.
const dimKeyedCandSQL = `, cand AS MATERIALIZED (
	SELECT x.ctid, x.keys, row_number() OVER (ORDER BY x.rk, x.kord) AS ord FROM (
		SELECT j.ctid, ` + dimKeysSQL + ` || chr(30) AS keys, row_number() OVER () AS rk, 0::bigint AS kord
		FROM {s}.jobs j WHERE j.ctid = ANY (ARRAY(SELECT ctid FROM nokey))
		UNION ALL
		SELECT c.ctid, c.keys || (chr(30) || s.k), c.rk, r.ord FROM slots s
		JOIN ready r ON r.k = s.k
		CROSS JOIN LATERAL (
			SELECT q.ctid, q.keys, row_number() OVER () AS rk FROM (
				SELECT ctid, ` + dimKeysSQL + ` AS keys FROM {s}.jobs
				WHERE status = 'queued' AND queue = $1 AND partition_key = s.k AND run_at <= now()
				ORDER BY priority DESC, run_at, id
				LIMIT least(s.free, s.share) + $LOOK
			) q
		) c
	) x
), part_lim AS (
	SELECT chr(30) AS k, (SELECT count(*) FROM nokey)::int AS free
	UNION ALL
	SELECT chr(30) || s.k, least(s.free, s.share) FROM slots s
), cursor AS (
	SELECT (SELECT k FROM ready ORDER BY ord DESC LIMIT 1) AS k
)`

// dimPickSQL ends both variants: which candidates start.
//
//   - running counts the running jobs of the queue claimed under a limit per key of a
//     limited dimension: it reads the queue's entries of jobs_limited_running_idx (as the
//     global count does), at most the jobs the limits let run, and their keys.
//   - lim is the room of each key the candidates carry: its dimension's limit ($LIMS, in
//     the order of $DIMS) minus its running jobs; on the keyed path also each partition
//     key's (part_lim).
//   - dimwalk takes the candidates one by one in claim order (arrays indexed by position: one
//     step reads one element), keeping the keys of those it took (taken): a candidate is
//     taken when none of its keys has as many taken as it has room, until the budget is
//     taken or the candidates are through. A job is checked against every one of its
//     keys: a full key in any dimension passes it over. (OFFSET 0 keeps the check a
//     subquery evaluated once per step: pulled up, it was evaluated once per use.)
//   - picked locks the jobs taken, SKIP LOCKED, re-checking that each is still queued
//     (another statement may have moved it since this statement's snapshot). The claim
//     runs under the queue's claim lock, so no other limited claim takes a job or a key's
//     room meanwhile: a job locked elsewhere is one fewer started, never one too many.
const dimPickSQL = `, running AS MATERIALIZED (
	SELECT e.key || chr(31) || e.value AS k, count(*)::int AS n
	FROM {s}.jobs r CROSS JOIN LATERAL jsonb_each_text(r.concurrency_keys) e
	WHERE r.queue = $1 AND r.status = 'running' AND r.limited AND r.attempts >= 0
	  AND r.concurrency_keys IS NOT NULL AND e.key = ANY ($DIMS::text[])
	GROUP BY 1
), lim AS MATERIALIZED (
	SELECT u.k, l.n - coalesce(r.n, 0) AS free
	FROM (SELECT DISTINCT k FROM cand, unnest(cand.keys) k) u
	JOIN unnest($DIMS::text[], $LIMS::int[]) AS l(d, n) ON l.d = split_part(u.k, chr(31), 1)
	LEFT JOIN running r ON r.k = u.k
	UNION ALL
	SELECT k, free FROM part_lim
), arr AS MATERIALIZED (
	SELECT array_agg(ctid ORDER BY ord) AS ctids, array_agg(to_jsonb(keys) ORDER BY ord) AS keys,
		count(*)::int AS n
	FROM cand
), dimwalk AS (
	SELECT 0 AS i, NULL::tid AS ctid, '{}'::text[] AS taken, 0 AS n, false AS ok
	UNION ALL
	SELECT w.i + 1, a.ctids[w.i + 1], CASE WHEN x.ok THEN w.taken || x.keys ELSE w.taken END,
		w.n + x.ok::int, x.ok
	FROM dimwalk w CROSS JOIN arr a CROSS JOIN LATERAL (
		SELECT k.keys, NOT EXISTS (
			SELECT 1 FROM unnest(k.keys) ck(k) JOIN lim l ON l.k = ck.k
			WHERE l.free <= (SELECT count(*) FROM unnest(w.taken) t(k) WHERE t.k = ck.k)) AS ok
		FROM (SELECT ARRAY(SELECT jsonb_array_elements_text(a.keys[w.i + 1])) AS keys) k
		OFFSET 0
	) x
	WHERE w.i < a.n AND w.n < (SELECT n FROM budget)
), picked AS (
	SELECT j.ctid FROM {s}.jobs j
	WHERE j.ctid = ANY (ARRAY(SELECT ctid FROM dimwalk WHERE ok))
	  AND (j.status || '') = 'queued'
	FOR UPDATE SKIP LOCKED
)`

// dimStatement renders the per-dimension variant of a limited claim: prefix, the pick
// (cand and the rest), suffix, with $DIMS and $LIMS the parameters that carry the
// dimensions and their limits.
func dimStatement(prefix, pick, suffix, dims, lims string) string {
	r := strings.NewReplacer("$DIMS", dims, "$LIMS", lims, "$LOOK", strconv.Itoa(DimLookahead))
	return r.Replace(prefix + pick + dimPickSQL + suffix)
}

// dimmed reports whether l limits dimensions (the claims check every key of a job).
func dimmed(l jobtype.QueueLimits) bool { return len(l.ConcurrencyKeys) > 0 }

// dimArgs returns l's dimensions and their limits as two parallel arrays.
func dimArgs(l jobtype.QueueLimits) ([]string, []int32) {
	dims := make([]string, 0, len(l.ConcurrencyKeys))
	lims := make([]int32, 0, len(l.ConcurrencyKeys))
	for d, n := range l.ConcurrencyKeys {
		dims, lims = append(dims, d), append(lims, int32(n))
	}
	return dims, lims
}

// sameLimits reports whether a and b are the same limits.
func sameLimits(a, b jobtype.QueueLimits) bool {
	return a.Concurrency == b.Concurrency && a.KeyConcurrency == b.KeyConcurrency &&
		a.Rate == b.Rate && a.RatePeriod == b.RatePeriod && a.KeyRate == b.KeyRate &&
		a.KeyRatePeriod == b.KeyRatePeriod && a.Fair == b.Fair &&
		maps.Equal(a.ConcurrencyKeys, b.ConcurrencyKeys)
}
