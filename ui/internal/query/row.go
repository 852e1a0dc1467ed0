package query

import (
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock"
)

// Filter selects the jobs of a list page. Empty fields match everything.
type Filter struct {
	Status skiplock.JobStatus
	Queue  string
	Kind   string
	Search string // a substring of the args or metadata JSON; searched in a bounded window
	Before int64  // the keyset cursor: only ids below it; 0 means from the newest
	Limit  int
}

// Row is one job of a list.
type Row struct {
	ID          int64
	Queue       string
	Kind        string
	Status      string
	Attempts    int
	MaxAttempts int
	RunAt       time.Time
	CreatedAt   time.Time
	FinishedAt  *time.Time
	LastError   string
	Args        string
	Archived    bool
	Priority    int
}

// listColumns is what a list row shows: short prefixes of the args and the last error,
// never a whole payload, and no ciphertext of encrypted args (skiplock.Keyring).
const listColumns = `id, queue, kind, status, attempts, max_attempts, run_at, created_at, finished_at,
	left(coalesce(last_error, ''), 300),
	CASE WHEN payload ? 'skiplock_sealed' THEN '(encrypted)' ELSE left(payload::text, 160) END, priority`

// collectRows reads rows of listColumns, newest first.
func collectRows(rows pgx.Rows, archived bool) ([]Row, error) {
	out, err := collectOrdered(rows, archived)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b Row) int { return compareDesc(a.ID, b.ID) })
	return out, nil
}

// collectOrdered reads rows of listColumns in the order the statement gave them.
func collectOrdered(rows pgx.Rows, archived bool) ([]Row, error) {
	var out []Row
	var r Row
	var priority int16
	_, err := pgx.ForEachRow(rows, []any{&r.ID, &r.Queue, &r.Kind, &r.Status, &r.Attempts, &r.MaxAttempts,
		&r.RunAt, &r.CreatedAt, &r.FinishedAt, &r.LastError, &r.Args, &priority}, func() error {
		r.Archived, r.Priority = archived, int(priority)
		out = append(out, r)
		r = Row{}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func compareDesc(a, b int64) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}

// cursor turns "from the newest" into an id above every job.
func cursor(before int64) int64 {
	if before <= 0 {
		return 1<<63 - 1
	}
	return before
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
