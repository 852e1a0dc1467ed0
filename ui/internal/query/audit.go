package query

// This file holds the audit log's table (migration 012_ui_audit): recording an entry,
// which keeps each kind bounded in the same statement, and reading the newest.

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// auditAddSQL records an entry of kind $1 (refused or not) and deletes the entries of
// that kind older than the newest $7 - 1, so that with the new one the kind holds at
// most $7 (the new row is not in the statement's snapshot, so the cut never counts it).
// The cut is found by walking ui_audit_kind_idx backwards: at most $7 index entries.
// Kinds are bounded apart, so a flood of refused requests cannot push actions out.
const auditAddSQL = `WITH cut AS (
	SELECT id FROM {s}.ui_audit WHERE refused = $1 ORDER BY id DESC OFFSET $7 - 1 LIMIT 1
), trimmed AS (
	DELETE FROM {s}.ui_audit WHERE refused = $1 AND id <= (SELECT id FROM cut)
)
INSERT INTO {s}.ui_audit (refused, who, client, action, target, result)
VALUES ($1, $2, $3, $4, $5, $6)`

// auditRecentSQL reads the newest $2 entries of kind $1, through ui_audit_kind_idx.
const auditRecentSQL = `SELECT at, who, client, action, target, result
FROM {s}.ui_audit WHERE refused = $1 ORDER BY id DESC LIMIT $2`

// auditJobSQL reads the newest $2 actions on job $1 alone (targets "job N" and "job N
// ..."; bulk actions name their jobs in a list and are not matched). It reads the bounded
// table (at most 10,000 actions) without an index: a few milliseconds.
const auditJobSQL = `SELECT at, who, client, action, target, result
FROM {s}.ui_audit WHERE NOT refused AND (target = 'job ' || $1::bigint OR starts_with(target, 'job ' || $1::bigint || ' '))
ORDER BY id DESC LIMIT $2`

// AuditEntry is one audited action or refused request: who did what to what, from
// where, when (the database's clock), and what came of it.
type AuditEntry struct {
	At      time.Time
	Refused bool // a refused forgery (bad CSRF token, another origin) or a failed sign-in
	Who     string
	From    string // the client address
	Action  string
	Target  string
	Result  string
}

// Audit writes and reads the audit log.
type Audit struct {
	pool             *pgxpool.Pool
	add, recent, job string
}

func newAudit(pool *pgxpool.Pool, x func(string) string) *Audit {
	return &Audit{pool: pool, add: x(auditAddSQL), recent: x(auditRecentSQL), job: x(auditJobSQL)}
}

// ForJob returns the newest limit actions taken on job id alone, newest first.
func (a *Audit) ForJob(ctx context.Context, id int64, limit int) ([]AuditEntry, error) {
	return a.read(ctx, a.job, false, id, limit)
}

// Add records e and keeps the newest keep entries of its kind (keep ≥ 1).
func (a *Audit) Add(ctx context.Context, e AuditEntry, keep int) error {
	_, err := a.pool.Exec(ctx, a.add, e.Refused, e.Who, e.From, e.Action, e.Target, e.Result, max(keep, 1))
	return err
}

// Recent returns the newest limit entries of a kind (refused or not), newest first.
func (a *Audit) Recent(ctx context.Context, refused bool, limit int) ([]AuditEntry, error) {
	return a.read(ctx, a.recent, refused, refused, limit)
}

// read runs sql with args and collects its entries, each of kind refused.
func (a *Audit) read(ctx context.Context, sql string, refused bool, args ...any) ([]AuditEntry, error) {
	rows, err := a.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	var out []AuditEntry
	e := AuditEntry{Refused: refused}
	_, err = pgx.ForEachRow(rows, []any{&e.At, &e.Who, &e.From, &e.Action, &e.Target, &e.Result}, func() error {
		out = append(out, e)
		return nil
	})
	return out, err
}
