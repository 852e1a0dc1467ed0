package query

import (
	"strings"

	"github.com/jackc/pgx/v5"
)

// schemaSQL returns the renderer of the statements of schema: it puts the schema,
// sanitized by pgx.Identifier, for each {s} of a statement template.
func schemaSQL(schema string) func(string) string {
	s := pgx.Identifier{schema}.Sanitize()
	return func(t string) string { return strings.ReplaceAll(t, "{s}", s) }
}
