// This file holds the checks of names and text the root package shares with the enqueue
// engine: the schema name here, the queue name, text Postgres can store and payloads
// jsonb takes in internal/enqueue and internal/pgutil. Everything is checked before
// anything is written, so bad input costs the caller's transaction nothing.

package skiplock

import (
	"fmt"
	"regexp"

	"github.com/skiplock/skiplock/internal/enqueue"
	"github.com/skiplock/skiplock/internal/pgutil"
)

var schemaRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,47}$`)

// validSchema checks a schema name; names are also quoted wherever they are used.
func validSchema(s string) error {
	if !schemaRE.MatchString(s) {
		return fmt.Errorf("%w: %q: use [a-z_][a-z0-9_], 1-48 characters", ErrInvalidSchema, s)
	}
	return nil
}

// validQueue checks a queue name (see [enqueue.ValidQueue]).
func validQueue(q string) error { return enqueue.ValidQueue(q) }

// validText reports whether Postgres can store s as text.
func validText(s string) bool { return enqueue.ValidText(s) }

// truncate returns s cut to n bytes, marked when cut, for messages.
func truncate(s string, n int) string { return enqueue.Truncate(s, n) }

// checkJSONB rejects JSON that Postgres's jsonb would refuse (see [pgutil.CheckJSONB]).
func checkJSONB(b []byte) error { return pgutil.CheckJSONB(b) }
