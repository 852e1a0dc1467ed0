package ui

import (
	"sync"
	"time"
)

// maxAudit is how many recent actions the /audit page keeps, per Handler.
const maxAudit = 500

// auditEntry is one action: who did what to what, when, and what came of it.
type auditEntry struct {
	At     time.Time
	Who    string
	From   string // the client address
	Action string
	Target string
	Result string
}

// auditLog is a ring of the latest maxAudit entries.
type auditLog struct {
	mu      sync.Mutex
	entries []auditEntry
	next    int
}

func (a *auditLog) add(e auditEntry) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.entries) < maxAudit {
		a.entries = append(a.entries, e)
		return
	}
	a.entries[a.next] = e
	a.next = (a.next + 1) % maxAudit
}

// recent returns the entries, newest first.
func (a *auditLog) recent() []auditEntry {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]auditEntry, 0, len(a.entries))
	for i := range a.entries {
		j := (a.next - 1 - i + 2*len(a.entries)) % len(a.entries)
		out = append(out, a.entries[j])
	}
	return out
}
