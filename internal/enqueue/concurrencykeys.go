// This file holds a job's concurrency keys (the root's EnqueueOptions.ConcurrencyKeys):
// their checks, and their form as a statement argument.

package enqueue

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
)

// Limits of a job's concurrency keys, and of a queue's per-dimension limits.
const (
	// MaxDimensions is the most dimensions a job's keys, or a queue's limits, name.
	MaxDimensions = 8
	// MaxKeyBytes is the longest key of one dimension, in bytes (as PartitionKey).
	MaxKeyBytes = 255
)

// ValidDimension reports whether name may name a dimension: [a-z0-9_-], 1-64 characters,
// as a queue name.
func ValidDimension(name string) bool { return ValidQueue(name) == nil }

// checkConcurrencyKeys checks a job's keys by dimension.
func checkConcurrencyKeys(keys map[string]string) error {
	if len(keys) == 0 {
		return nil // most jobs: no sorting, no allocation
	}
	if len(keys) > MaxDimensions {
		return fmt.Errorf("%w: ConcurrencyKeys has %d dimensions: at most %d", ErrInvalidOptions, len(keys), MaxDimensions)
	}
	for _, d := range slices.Sorted(maps.Keys(keys)) {
		k := keys[d]
		if !ValidDimension(d) {
			return fmt.Errorf("%w: ConcurrencyKeys dimension %q: use [a-z0-9_-], 1-64 characters", ErrInvalidOptions, Truncate(d, 70))
		}
		if k == "" || len(k) > MaxKeyBytes || !ValidText(k) {
			return fmt.Errorf("%w: ConcurrencyKeys[%q] = %q: a key is 1-%d bytes of UTF-8 without NUL (leave the dimension out for none)",
				ErrInvalidOptions, d, Truncate(k, 40), MaxKeyBytes)
		}
	}
	return nil
}

// concurrencyKeysJSON is keys as the concurrency_keys column's text (a JSON object), nil
// for none.
func concurrencyKeysJSON(keys map[string]string) *string {
	if len(keys) == 0 {
		return nil
	}
	b, _ := json.Marshal(keys) // a map of strings always marshals
	s := string(b)
	return &s
}

// CheckDimensionLimits checks a queue's per-dimension limits (QueueLimits.ConcurrencyKeys).
func CheckDimensionLimits(dims map[string]int) error {
	if len(dims) > MaxDimensions {
		return fmt.Errorf("ConcurrencyKeys has %d dimensions, at most %d", len(dims), MaxDimensions)
	}
	for _, d := range slices.Sorted(maps.Keys(dims)) {
		if !ValidDimension(d) {
			return fmt.Errorf("ConcurrencyKeys dimension %q: use [a-z0-9_-], 1-64 characters", Truncate(d, 70))
		}
		if n := dims[d]; n < 1 || n > math.MaxInt32 {
			return fmt.Errorf("ConcurrencyKeys[%q] is %d: a limit is 1 to %d (leave the dimension out for none)", d, n, math.MaxInt32)
		}
	}
	return nil
}
