package ui

import "time"

// SetSessionClock makes the sessions and the login throttle of h read time from now, so
// tests can step past an expiry without waiting for it.
func SetSessionClock(h *Handler, now func() time.Time) {
	h.sess.mu.Lock()
	defer h.sess.mu.Unlock()
	h.sess.now = now
}
