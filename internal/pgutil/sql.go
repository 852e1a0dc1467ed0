// Package pgutil holds what every engine package needs to talk to the database: the
// rendering of statements for a schema, the retry of transient errors, the gate that
// bounds a worker's statements in flight by the size of its fleet, and the check that
// Postgres's jsonb takes a JSON document (CheckJSONB).
package pgutil

import (
	"strings"

	"github.com/jackc/pgx/v5"
)

// Render puts the sanitized schema identifier where a statement template says {s}.
// Every owner of statements calls it once, at construction.
func Render(schema, template string) string {
	return strings.ReplaceAll(template, "{s}", pgx.Identifier{schema}.Sanitize())
}

// PlanSettingsSQL, run first in a pipeline that is its own transaction, makes the
// statements after it run one cached plan per connection, made with sequential scans
// costed out. Both settings are local to the transaction (set_config's is_local): the
// connection goes back to the pool with its own. Run it only where skiplock owns the
// transaction, never in a caller's, where the settings would outlast skiplock's
// statements.
//
//   - plan_cache_mode: Postgres plans a prepared statement anew at each run (a custom
//     plan) while its generic plan's estimated cost is above the custom plans'. A
//     parameter that sets how many rows a statement touches (a LIMIT, an array of ids)
//     has no value in a generic plan, so the estimates differ where the plans do not, and
//     the statement is planned at every run. Forced, the generic plan is made once per
//     connection and kept until the table's statistics change.
//   - enable_seqscan: a generic plan made while the table is small reads it sequentially
//     (cheaper there, by its estimate) and would keep doing so while a backlog grows.
//     With sequential scans costed out, the plan made at any size reaches the rows by
//     their indexes, as it does on a large table.
//   - jit: the generic plan's estimate grows with the table (a claim's LIMIT $2 is taken
//     for a tenth of the due jobs), and past jit_above_cost (100,000 by default; a claim
//     of a queue of about 1.4 million jobs) Postgres compiled the statement with LLVM at
//     every run: 300 ms of a claim's 302 with 10^7 jobs queued (20 ms of inlining, 124 of
//     optimization, 153 of emission), which held a sustained drain to about 170 jobs/s.
//     These statements touch tens of rows; compiling them never pays.
//
// In the simple protocol no plan is cached, and only enable_seqscan and jit matter.
const PlanSettingsSQL = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true),
	set_config('enable_seqscan', 'off', true), set_config('jit', 'off', true)`
