package jobtype

// Completion says what happens to a job row when its handler succeeds. The zero value
// means the default: for [WorkerConfig].Completion, CompletionArchive; for a queue's
// ([QueueConfig].Completion) or a kind's ([KindConfig].Completion), the one of the level
// above (kind, then queue, then worker).
type Completion int

// The completion modes.
const (
	// CompletionArchive moves the row to jobs_archive with status succeeded: the hot table
	// stays small and the history stays queryable until the archive retention deletes it.
	CompletionArchive Completion = iota + 1
	// CompletionDelete deletes the row: the least work per job, no history.
	CompletionDelete
	// CompletionKeep keeps the row in the jobs table with status succeeded; the sweeper
	// deletes it after the archive retention.
	CompletionKeep
)
