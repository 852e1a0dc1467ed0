// This file holds unique jobs by what they are: the UniqueOpts an enqueue may carry, and
// the key they compute (kind, optionally queue, args and time bucket, hashed). The key
// goes in the job's unique_key; the insert that honours it is in queue.go.

package skiplock

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// UniqueOpts makes a job unique by what it is: at most one job with the same kind (and,
// as chosen, the same queue, args and time bucket) exists in the states that count. A
// duplicate enqueue inserts nothing and returns the existing job with
// [JobRow].Duplicate set and a nil error; [Client.EnqueueMany] skips it and does not
// count it.
//
// Active jobs (queued, running) are arbitrated by a unique index, so concurrent enqueues
// from any number of transactions leave one row. Finished states that count are looked
// up by the same statement among the finished jobs of the jobs table and the archive.
//
// The zero value means: unique by kind alone, among queued and running jobs.
type UniqueOpts struct {
	// ByArgs makes the args part of the key, as canonical JSON (object keys sorted, so
	// field order does not matter). Defaults to false: the args do not matter.
	ByArgs bool
	// ArgsFields limits ByArgs to these top-level JSON fields of the args (by their JSON
	// names); a missing field counts as null. Setting it implies ByArgs. Defaults to
	// empty: every field.
	ArgsFields []string
	// ByQueue makes the queue part of the key: the same job may then be queued once per
	// queue. Defaults to false.
	ByQueue bool
	// ByPeriod makes the time bucket part of the key: at most one job per bucket of this
	// length (buckets are aligned to the Unix epoch, so 1h buckets start on the hour UTC).
	// The bucket is that of RunAt when set, else of the enqueuing host's clock. Zero means
	// no bucket; negative is an error.
	ByPeriod time.Duration
	// States are the states in which an existing job blocks a new one. They must include
	// queued and running. Adding succeeded means a job done within the period blocks
	// another: with the default CompletionArchive the archive is searched, and the
	// archive retention bounds how far back; under CompletionDelete a succeeded job
	// leaves no row and cannot count. Defaults to queued and running.
	States []JobStatus
}

// uniqueKeyPrefix marks keys computed from UniqueOpts, apart from caller-chosen keys.
const uniqueKeyPrefix = "u1:"

// allStatuses lists every job status, for validation and for periodic occurrences.
var allStatuses = []JobStatus{StatusQueued, StatusRunning, StatusSucceeded, StatusFailed, StatusDead, StatusCancelled}

// uniqueKey computes the key of a job enqueued with u, and the finished states that count
// (nil when only the active states do). now is the bucket time when runAt is nil.
func (u *UniqueOpts) uniqueKey(kind, queue string, payload []byte, runAt *time.Time, now time.Time) (string, []string, error) {
	if u.ByPeriod < 0 {
		return "", nil, fmt.Errorf("%w: Unique.ByPeriod %s is negative", ErrInvalidOptions, u.ByPeriod)
	}
	var finished []string
	if len(u.States) > 0 {
		if !slices.Contains(u.States, StatusQueued) || !slices.Contains(u.States, StatusRunning) {
			return "", nil, fmt.Errorf("%w: Unique.States %v must include queued and running", ErrInvalidOptions, u.States)
		}
		for _, s := range u.States {
			if !slices.Contains(allStatuses, s) {
				return "", nil, fmt.Errorf("%w: Unique.States: unknown status %q", ErrInvalidOptions, s)
			}
			if s != StatusQueued && s != StatusRunning && !slices.Contains(finished, string(s)) {
				finished = append(finished, string(s))
			}
		}
	}
	// The key hashes a JSON array, so its parts cannot run into each other.
	parts := []any{kind, nil, nil, nil}
	if u.ByQueue {
		parts[1] = queue
	}
	if u.ByArgs || len(u.ArgsFields) > 0 {
		canon, err := canonicalArgs(payload, u.ArgsFields)
		if err != nil {
			return "", nil, fmt.Errorf("%w: kind %q: %v", ErrInvalidPayload, kind, err)
		}
		parts[2] = canon
	}
	if u.ByPeriod > 0 {
		t := now
		if runAt != nil {
			t = *runAt
		}
		parts[3] = t.UTC().Truncate(u.ByPeriod).Unix()
	}
	b, err := json.Marshal(parts)
	if err != nil {
		return "", nil, fmt.Errorf("%w: kind %q: %v", ErrInvalidPayload, kind, err)
	}
	sum := sha256.Sum256(b)
	return uniqueKeyPrefix + hex.EncodeToString(sum[:]), finished, nil
}

// canonicalArgs decodes payload and returns it (or its fields) in a form that marshals
// to the same JSON whatever the order of object keys: encoding/json sorts map keys, and
// numbers keep their text.
func canonicalArgs(payload []byte, fields []string) (any, error) {
	d := json.NewDecoder(bytes.NewReader(payload))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if len(fields) == 0 {
		return v, nil
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("Unique.ArgsFields needs args that marshal to a JSON object, got %s", strings.TrimSpace(string(payload[:min(len(payload), 20)])))
	}
	out := make(map[string]any, len(fields))
	for _, f := range fields {
		out[f] = obj[f] // nil when missing
	}
	return out, nil
}
