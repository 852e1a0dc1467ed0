package ui

// This file holds where audit entries go: a log line each, and a row of the ui_audit
// table (migration 012_ui_audit), bounded per kind; refused requests are recorded at a
// bounded rate, so a flood of forgeries costs the database little.

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/skiplock/skiplock/ui/internal/query"
)

// Audit limits.
const (
	// maxAuditActions is how many actions the ui_audit table keeps (all instances
	// together); maxAuditRefused how many refused requests, apart.
	maxAuditActions = 10_000
	maxAuditRefused = 1_000
	// auditShown and refusedShown are how many of each the /audit page lists.
	auditShown   = 500
	refusedShown = 100
	// maxRefusedPerMinute bounds the refused requests one Handler records per minute;
	// past it they are counted, and the next one recorded says how many were not.
	maxRefusedPerMinute = 60
	// maxAuditField bounds each text of an entry, in characters.
	maxAuditField = 300
	// auditTimeout bounds the write of an entry, apart from Config.QueryTimeout: an
	// action that used up its query time still gets its entry.
	auditTimeout = 5 * time.Second
)

// auditLog records entries to the log and to the ui_audit table.
type auditLog struct {
	db                    *query.Audit
	log                   *slog.Logger
	keepActions, keepRefs int

	mu      sync.Mutex
	window  time.Time // the minute refused requests are counted in
	refused int       // recorded in window
	dropped int       // not recorded since the last recorded one
}

// allowRefused reports whether a refused request may be recorded now, and how many were
// not recorded before it.
func (a *auditLog) allowRefused() (bool, int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	if now.Sub(a.window) >= time.Minute {
		a.window, a.refused = now, 0
	}
	if a.refused >= maxRefusedPerMinute {
		a.dropped++
		return false, 0
	}
	a.refused++
	skipped := a.dropped
	a.dropped = 0
	return true, skipped
}

// add writes e as a log line and a table row. ctx is the request's: the write goes on
// when the client leaves, within auditTimeout. A failed write is logged; the log line
// stays the record.
func (a *auditLog) add(ctx context.Context, e query.AuditEntry) {
	keep := a.keepActions
	msg := "skiplock ui: action"
	if e.Refused {
		ok, skipped := a.allowRefused()
		if !ok {
			return
		}
		if skipped > 0 {
			e.Result += " (and " + strconv.Itoa(skipped) + " more refused requests not recorded)"
		}
		keep, msg = a.keepRefs, "skiplock ui: refused"
	}
	for _, f := range []*string{&e.Who, &e.From, &e.Action, &e.Target, &e.Result} {
		*f = clip(*f, maxAuditField)
	}
	a.log.Info(msg, "who", e.Who, "from", e.From, "action", e.Action, "target", e.Target, "result", e.Result)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditTimeout)
	defer cancel()
	if err := a.db.Add(ctx, e, keep); err != nil {
		a.log.Error("skiplock ui: the audit entry was not stored (the log line above is its record)", "err", err)
	}
}

// clip cuts s to at most n characters, marking the cut.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}
