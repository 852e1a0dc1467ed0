// This file holds the key of a job unique by what it is: kind, optionally queue, args
// and time bucket, hashed, and the finished states that count.

package enqueue

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/skiplock/skiplock/internal/jobtype"
)

// Unique makes a job unique by what it is: the root package's UniqueOpts, whose doc
// comments say what each field means.
type Unique struct {
	ByArgs     bool
	ArgsFields []string
	ByQueue    bool
	ByPeriod   time.Duration
	States     []jobtype.JobStatus
	Replace    bool
	Debounce   time.Duration
	MaxDelay   time.Duration
}

// uniqueKeyPrefix marks keys computed from UniqueOpts, apart from caller-chosen keys.
const uniqueKeyPrefix = "u1:"

// AllStatuses lists every job status, for validation and for periodic occurrences.
var AllStatuses = []jobtype.JobStatus{jobtype.StatusQueued, jobtype.StatusRunning, jobtype.StatusSucceeded, jobtype.StatusFailed, jobtype.StatusDead, jobtype.StatusCancelled}

// key computes the key of a job enqueued with u, and the finished states that count
// (nil when only the active states do). now is the bucket time when runAt is nil.
func (u *Unique) key(kind, queue string, payload []byte, runAt *time.Time, now time.Time) (string, []string, error) {
	if u.ByPeriod < 0 {
		return "", nil, fmt.Errorf("%w: Unique.ByPeriod %s is negative", ErrInvalidOptions, u.ByPeriod)
	}
	var finished []string
	if len(u.States) > 0 {
		if !slices.Contains(u.States, jobtype.StatusQueued) || !slices.Contains(u.States, jobtype.StatusRunning) {
			return "", nil, fmt.Errorf("%w: Unique.States %v must include queued and running", ErrInvalidOptions, u.States)
		}
		for _, s := range u.States {
			if !slices.Contains(AllStatuses, s) {
				return "", nil, fmt.Errorf("%w: Unique.States: unknown status %q", ErrInvalidOptions, s)
			}
			if s != jobtype.StatusQueued && s != jobtype.StatusRunning && !slices.Contains(finished, string(s)) {
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

// HolderEdit is what a duplicate enqueue does to a queued job holding its key.
type HolderEdit struct {
	Replace  bool          // give the holder the new job's payload
	Debounce time.Duration // push the holder's run_at to now() + Debounce; 0: leave it
	MaxDelay time.Duration // but never past its created_at + MaxDelay; 0: no bound
}

// any reports whether e changes the holder at all.
func (e HolderEdit) any() bool { return e.Replace || e.Debounce > 0 }

// holderEdit checks u's Replace, Debounce and MaxDelay.
func (u *Unique) holderEdit() (HolderEdit, error) {
	e := HolderEdit{Replace: u.Replace, Debounce: u.Debounce, MaxDelay: u.MaxDelay}
	switch {
	case e.Debounce < 0:
		return e, fmt.Errorf("%w: Unique.Debounce %s is negative", ErrInvalidOptions, e.Debounce)
	case e.MaxDelay < 0:
		return e, fmt.Errorf("%w: Unique.MaxDelay %s is negative", ErrInvalidOptions, e.MaxDelay)
	case e.MaxDelay > 0 && e.MaxDelay < e.Debounce:
		return e, fmt.Errorf("%w: Unique.MaxDelay %s is shorter than Debounce %s", ErrInvalidOptions, e.MaxDelay, e.Debounce)
	case e.MaxDelay > 0 && e.Debounce == 0:
		return e, fmt.Errorf("%w: Unique.MaxDelay needs Debounce", ErrInvalidOptions)
	}
	return e, nil
}
