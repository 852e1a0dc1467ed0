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
