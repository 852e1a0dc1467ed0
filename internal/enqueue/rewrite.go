// This file holds what runs on a prepared job just before it is written: the client's
// insert middleware (which may rewrite it, checked again after) and the sealing of an
// encrypted payload.

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

// Sealer encrypts a payload of kind for storage (the root's Keyring).
type Sealer func(kind string, payload []byte) ([]byte, error)

// Seal replaces j's payload by its encryption when j is to be encrypted, once, and checks
// that the result still fits maxBytes. Every path that writes a job calls it last (the
// enqueues through Enqueuing, workflows, batches and sequences after prepare).
func (j *Job) Seal(maxBytes int) error {
	if j.Sealer == nil {
		return nil
	}
	sealed, err := j.Sealer(j.Kind, j.Payload)
	if err != nil {
		return fmt.Errorf("%w: kind %q: encrypting the args: %v", ErrInvalidPayload, j.Kind, err)
	}
	if maxBytes > 0 && len(sealed) > maxBytes {
		return fmt.Errorf("%w: kind %q: %d bytes once encrypted, the limit is %d (Config.MaxPayloadBytes)", ErrPayloadTooLarge, j.Kind, len(sealed), maxBytes)
	}
	j.Payload, j.Sealer = sealed, nil
	return nil
}

// rewrite runs the insert middleware on j and checks what they changed as an enqueue
// checks its options. The unique key stays the one computed from the caller's args.
func (e *Inserter) rewrite(ctx context.Context, j *Job) error {
	if len(e.mw) == 0 {
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
	for i, mw := range e.mw {
		if err := mw(ctx, ij); err != nil {
			return fmt.Errorf("skiplock: insert middleware %d refused the job of kind %q: %w", i, j.Kind, err)
		}
	}
	o := Options{Queue: ij.Queue, Priority: ij.Priority, RunAt: ij.RunAt, MaxAttempts: int(j.MaxAttempts)}
	if err := checkOptions(&o); err != nil {
		return fmt.Errorf("insert middleware: %w", err)
	}
	if err := checkPayload(j.Kind, ij.Payload, e.maxBytes); err != nil {
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
