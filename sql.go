// This file holds the rendering of statement templates: every statement is a named
// constant beside the code that runs it, written with {s} where the schema goes, and
// rendered once, by its owner, at construction.

package skiplock

import (
	"strings"

	"github.com/jackc/pgx/v5"
)

// renderSQL puts the sanitized schema identifier where a statement template says {s}.
// Every owner of statements calls it once, at construction.
func renderSQL(schema, template string) string {
	return strings.ReplaceAll(template, "{s}", pgx.Identifier{schema}.Sanitize())
}
