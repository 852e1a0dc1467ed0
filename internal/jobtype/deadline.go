package jobtype

import (
	"fmt"
	"time"
)

// NotStartedError is the error of a job claimed past its deadline: the worker ends it
// without running its handler, and without counting the attempt.
type NotStartedError struct {
	Deadline  time.Time // the job's deadline
	ClaimedAt time.Time // the claim's time, by the database clock
}

// Error says what happened.
func (e *NotStartedError) Error() string {
	return fmt.Sprintf("%s: the job's deadline %s had passed when a worker claimed it at %s; no attempt was started",
		ErrDeadlineExceeded, e.Deadline.UTC().Format(time.RFC3339Nano), e.ClaimedAt.UTC().Format(time.RFC3339Nano))
}

// Unwrap returns ErrDeadlineExceeded.
func (e *NotStartedError) Unwrap() error { return ErrDeadlineExceeded }

// TimeLeft is how long the attempt of row, claimed at row.LockedAt, has before the job's
// deadline, both by the database clock; ok is false when the job has no deadline.
func TimeLeft(row *JobRow) (left time.Duration, ok bool) {
	if row.Deadline.IsZero() {
		return 0, false
	}
	return row.Deadline.Sub(row.LockedAt), true
}
