package ui

import "time"

// SetSessionClock makes the sessions and the login throttle of h read time from now, so
// tests can step past an expiry without waiting for it.
func SetSessionClock(h *Handler, now func() time.Time) {
	h.sess.mu.Lock()
	defer h.sess.mu.Unlock()
	h.sess.now = now
}

// SetAuditLimits makes h keep only the newest actions and refused requests of the audit
// table, so a test can see the bound without writing thousands of rows.
func SetAuditLimits(h *Handler, actions, refused int) {
	h.audit.keepActions, h.audit.keepRefs = actions, refused
}
