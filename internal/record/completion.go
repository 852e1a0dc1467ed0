// This file holds the completion modes (archive, delete, keep): what happens to a job row
// when its handler succeeds, and the fenced statement that records it in each mode. The
// completer (complete.go) and CompleteTx (the root's handle.go) run these statements.

package record

import (
	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/ownership"
	"github.com/skiplock/skiplock/internal/pgutil"
)

// CompleteSQL returns the statement that records successes in mode, matching the claimed
// attempts (fenceSQL). With report, it also writes what the handlers reported: $4 holds
// each job's output and $5 its latest progress (NULL where none), at its pair's place
// (pairOutput, pairProgress). Batches where no handler reported anything use the plain
// statement.
//
// With skipLocked, it passes over the rows another transaction has locked, instead of
// waiting for it, and returns the ids it recorded (the completer writes the others with
// a later batch). The lock is most often a claim's: a claim in READ COMMITTED that meets a
// row a concurrent claim took since its snapshot follows the row to its newest version,
// locks it, and only then finds it no longer queued and skips it; the lock stays until the
// claim commits. Waiting for it, a success batch also held its own snapshot, and with
// it the horizon below which the claims' index entries can be marked dead, so the claims
// grew slower: with 16 worker processes on one queue, success batches averaged 68–211 ms,
// most of it waiting (in samples of pg_stat_activity, every waiting batch's blocker was a
// claim). The rows it could lock are gathered once, as an array that the DELETE or UPDATE
// then reaches through the primary key (see heartbeatSQL: id IN (SELECT ...) ran a
// nested-loop semi join over the whole table when its statistics said it was empty).
func CompleteSQL(mode jobtype.Completion, report, skipLocked bool) string {
	where := ownership.FenceSQL
	returning := ``
	if skipLocked {
		where = `id = ANY (ARRAY(SELECT id FROM {s}.jobs WHERE ` + ownership.FenceSQL + `
	FOR UPDATE SKIP LOCKED))`
		returning = `
RETURNING id`
	}
	output, progress := `output`, `progress`
	if report {
		output = ownership.PairOutput
		progress = `coalesce(` + ownership.PairProgress + `, progress)`
	}
	switch mode {
	case jobtype.CompletionDelete:
		return `DELETE FROM {s}.jobs WHERE ` + where + returning
	case jobtype.CompletionKeep:
		set := ``
		if report {
			set = `, output = ` + output + `, progress = ` + progress
		}
		return `UPDATE {s}.jobs SET status = 'succeeded', finished_at = now(), locked_at = NULL,
	lease_until = NULL` + set + `
WHERE ` + where + returning
	default:
		// One statement moves the rows: the DELETE's RETURNING feeds the archive INSERT.
		return `WITH done AS (
	DELETE FROM {s}.jobs WHERE ` + where + `
	RETURNING *
)
INSERT INTO {s}.jobs_archive (id, queue, kind, payload, status, priority, run_at, attempts,
	max_attempts, locked_by, last_error, errors, unique_key, created_at, finished_at, fence,
	metadata, progress, output, started_at)
SELECT id, queue, kind, payload, 'succeeded', priority, run_at, attempts,
	max_attempts, locked_by, last_error, errors, unique_key, created_at, now(), fence,
	metadata, ` + progress + `, ` + output + `, locked_at
FROM done` + returning
	}
}

// completeStmts are the statements of one completion mode, rendered (completeSQL).
type completeStmts struct {
	sql       string // plain
	sqlReport string // writing outputs and progress; "" when the mode keeps none
	// sqlSkip and sqlReportSkip are sql and sqlReport passing over locked rows.
	sqlSkip, sqlReportSkip string
}

// RenderCompleteStmts renders the success statements of every mode for schema: the
// completer's batches and CompleteTx write a success with the same ones.
func RenderCompleteStmts(schema string) map[jobtype.Completion]completeStmts {
	stmts := map[jobtype.Completion]completeStmts{}
	for _, mode := range completionModes {
		st := completeStmts{sql: pgutil.Render(schema, CompleteSQL(mode, false, false)), sqlSkip: pgutil.Render(schema, CompleteSQL(mode, false, true))}
		if mode != jobtype.CompletionDelete {
			st.sqlReport = pgutil.Render(schema, CompleteSQL(mode, true, false))
			st.sqlReportSkip = pgutil.Render(schema, CompleteSQL(mode, true, true))
		}
		stmts[mode] = st
	}
	return stmts
}

// completionModes are the modes a success is recorded with, in the order a flush writes
// their groups.
var completionModes = [...]jobtype.Completion{jobtype.CompletionArchive, jobtype.CompletionDelete, jobtype.CompletionKeep}
