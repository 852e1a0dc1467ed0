package skiplock

// SetPeriodicBeforeCommit makes w's periodic runner call f between enqueueing due
// occurrences and committing, so tests can fault the transaction there.
func SetPeriodicBeforeCommit(w *Worker, f func()) { w.periodic.beforeCommit = f }
