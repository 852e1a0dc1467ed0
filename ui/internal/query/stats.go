package query

import (
	"context"
	"time"

	"github.com/skiplock/skiplock"
)

// Stats reads the queue counts of a client's schema.
type Stats struct {
	client *skiplock.Client
	maxAge time.Duration
}

// Read returns the queue counts and when they were taken: from the shared cache
// ([skiplock.Client.CachedStats]) unless the DB's statsMaxAge is negative, afresh then.
func (s Stats) Read(ctx context.Context) ([]skiplock.QueueStats, time.Time, error) {
	if s.maxAge < 0 {
		st, err := s.client.Stats(ctx)
		return st, time.Now(), err
	}
	return s.client.CachedStats(ctx, s.maxAge)
}
