// This file holds the client's insert middleware, run on a prepared job just before it is
// written: they may rewrite it, and what they changed is checked again.

package enqueue

import (
	"context"
	"fmt"
	"maps"
	"strings"

	"github.com/skiplock/skiplock/internal/jobtype"
)

// ReservedMetadataPrefix starts the metadata keys skiplock writes itself (the workflow,
// task, batch and sequence marks).
const ReservedMetadataPrefix = "skiplock_"

// rewrite runs the insert middleware mws on j and checks what they changed as an enqueue
// checks its options. The unique key stays the one computed from the caller's args.
func rewrite(ctx context.Context, mws []jobtype.InsertMiddleware, maxBytes int, j *Job) error {
	if len(mws) == 0 {
		return nil
	}
	ij := &jobtype.InsertJob{Kind: j.Kind, Queue: j.Queue, Priority: int(j.Priority), Payload: j.Payload,
		Metadata: maps.Clone(j.Meta)}
	if ij.Metadata == nil {
		ij.Metadata = map[string]string{}
	}
	if j.RunAt != nil {
		ij.RunAt = *j.RunAt
	}
	for i, mw := range mws {
		if err := mw(ctx, ij); err != nil {
			return fmt.Errorf("skiplock: insert middleware %d refused the job of kind %q: %w", i, j.Kind, err)
		}
	}
	o := Options{Queue: ij.Queue, Priority: ij.Priority, RunAt: ij.RunAt, MaxAttempts: int(j.MaxAttempts)}
	if err := checkOptions(&o); err != nil {
		return fmt.Errorf("insert middleware: %w", err)
	}
	if err := checkPayload(j.Kind, ij.Payload, maxBytes); err != nil {
		return fmt.Errorf("insert middleware: %w", err)
	}
	if err := sameMarks(j.Meta, ij.Metadata); err != nil {
		return err
	}
	j.Queue, j.Priority, j.Payload, j.Meta = o.Queue, int16(o.Priority), ij.Payload, ij.Metadata
	j.RunAt = nil
	if !ij.RunAt.IsZero() {
		t := ij.RunAt
		j.RunAt = &t
	}
	return nil
}

// sameMarks refuses a middleware's metadata that added, changed or removed one of
// skiplock's own marks.
func sameMarks(before, after map[string]string) error {
	for k, v := range after {
		if strings.HasPrefix(k, ReservedMetadataPrefix) && before[k] != v {
			return fmt.Errorf("%w: insert middleware set the reserved metadata key %q", ErrInvalidOptions, Truncate(k, 40))
		}
	}
	for k := range before {
		if _, ok := after[k]; strings.HasPrefix(k, ReservedMetadataPrefix) && !ok {
			return fmt.Errorf("%w: insert middleware removed the reserved metadata key %q", ErrInvalidOptions, Truncate(k, 40))
		}
	}
	return nil
}
