package jobtype

// SweepResult counts what one sweep did.
type SweepResult struct {
	Skipped  bool  // another sweeper held the lock: this one did nothing
	Requeued int64 // expired jobs put back in the queue
	Dead     int64 // expired jobs that had no attempts left
	Purged   int64 // finished jobs deleted past retention
	// PurgedWorkflows counts the workflows deleted (with their tasks and edges) because
	// every task had ended and their jobs finished past ArchiveRetention.
	PurgedWorkflows int64
	Vacuumed        bool // the jobs table had many dead rows and was vacuumed and analyzed
	Reclaimed       []int64
}
