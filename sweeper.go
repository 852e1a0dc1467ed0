// This file holds the Sweeper: it takes back running jobs whose lease ended (their worker
// died) and deletes finished jobs past retention, one sweeper at a time
// per schema; the engine is internal/maintenance.

package skiplock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/maintenance"
)

// SweeperConfig configures a [Sweeper]. The zero value is valid.
type SweeperConfig struct {
	// Interval between sweeps. Defaults to [DefaultSweepInterval] (30s); zero or negative
	// means the default; a positive value under 1ms is an error.
	Interval time.Duration
	// VisibilityTimeout applies only to running jobs without a lease of their own: those
	// claimed by workers of a release before migration 002, which record no lease end. Such
	// a job is taken back once its locked_at (refreshed by its heartbeats) is older than
	// this, so set it to the old workers' visibility timeout during a rolling deploy. A job
	// claimed by a current worker is never taken back by the sweeper while that worker has
	// a row in the workers table (the other workers judge whether it is alive); without
	// one, it carries its lease end (that worker's own visibility timeout) and is taken
	// back when it passes, whatever this is. Defaults to
	// [DefaultVisibilityTimeout] (1m); zero or negative means the default; a positive value
	// under 1ms is an error.
	VisibilityTimeout time.Duration
	// ArchiveRetention is how long finished jobs are kept. Defaults to
	// [DefaultArchiveRetention] (7 days); zero or negative means the default.
	ArchiveRetention time.Duration
	// QueueRetention sets, per queue, how long its finished jobs are kept, over
	// ArchiveRetention. Defaults to none; a key that is not a valid queue name, or a value
	// that is not positive, is an error.
	QueueRetention map[string]time.Duration
	// KindRetention sets, per job kind, how long its finished jobs are kept, over
	// QueueRetention and ArchiveRetention. Defaults to none; an invalid kind, or a value
	// that is not positive, is an error.
	KindRetention map[string]time.Duration
	// DeadRetention is how long jobs that ended without success (dead: their attempts used
	// up; failed: a permanent error) are kept before the sweeper deletes them; until then
	// an operator can requeue them. Defaults to 0: kept until deleted or requeued (by
	// [Client.Delete], [Client.DeleteMany] or the dashboard); negative is an error. The
	// retentions above count from a job's end as this one does, and apply to the other
	// finished jobs (succeeded and cancelled).
	DeadRetention time.Duration
	// BatchSize bounds the rows one statement reclaims or deletes, so a sweep never holds
	// many locks or writes a huge transaction. Defaults to [DefaultSweepBatchSize] (1000);
	// zero or negative means the default.
	BatchSize int
	// Logger defaults to the client's logger.
	Logger *slog.Logger
}

// SweepResult counts what one sweep did.
type SweepResult = jobtype.SweepResult

// Sweeper takes back running jobs whose worker stopped heartbeating (it crashed, was
// killed, or lost the database) and deletes finished jobs past retention. Every [Worker]
// runs one unless its SweepInterval is negative; any number may run. Their Run loops elect
// one leader per schema (a row with a deadline in the leader table, renewed every few
// seconds and taken over within seconds when its process dies), and only the leader
// sweeps, purges and checks for dead rows; the others cost the database one election
// statement every few seconds. Each sweep also holds a transaction-scoped advisory lock,
// so a direct call to [Sweeper.Sweep] never overlaps another sweep. Both work behind a
// transaction-pooling PgBouncer.
type Sweeper struct {
	s *maintenance.Sweeper
}

// DefaultSweepBatchSize is the default of [SweeperConfig].BatchSize.
const DefaultSweepBatchSize = 1000

// NewSweeper returns a Sweeper for client. A field out of range is an error that
// matches [ErrInvalidConfig] and names the field.
func NewSweeper(client *Client, cfg SweeperConfig) (*Sweeper, error) {
	if client == nil {
		return nil, errors.New("skiplock: NewSweeper: client is nil")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultSweepInterval
	}
	if cfg.VisibilityTimeout <= 0 {
		cfg.VisibilityTimeout = DefaultVisibilityTimeout
	}
	if cfg.ArchiveRetention <= 0 {
		cfg.ArchiveRetention = DefaultArchiveRetention
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = DefaultSweepBatchSize
	}
	if cfg.Logger == nil {
		cfg.Logger = client.logger
	}
	return &Sweeper{s: maintenance.New(client.db, client.flows, client.notify, maintenance.Config(cfg), "sweeper-"+defaultWorkerID())}, nil
}

// Run takes part in the schema's leader election until ctx is cancelled, then returns
// nil. While this Sweeper leads, it sweeps every Interval and checks every second whether
// the jobs table needs a vacuum; while another process leads, it only stands by to take
// over. A Sweeper that leads when ctx ends gives up the lead, so another takes over at
// once.
func (s *Sweeper) Run(ctx context.Context) error { return s.s.Run(ctx) }

// Sweep runs one sweep now, if no other sweeper is running one: it reclaims every expired
// job (in batches, in one transaction holding the sweep lock), then deletes finished jobs
// past retention in batches of their own short transactions, and (at most once a minute)
// the job_waiters rows that waits cut off on a silent network left behind, an hour past
// their last refresh. Each transaction is bounded (see sweepTimeout and the limits beside
// it).
func (s *Sweeper) Sweep(ctx context.Context) (SweepResult, error) { return s.s.Sweep(ctx) }

// validate checks the fields of a Sweeper's configuration that have invalid values.
func (cfg *SweeperConfig) validate() error {
	if err := checkInterval("SweeperConfig.Interval", cfg.Interval, "the default"); err != nil {
		return err
	}
	if err := checkInterval("SweeperConfig.VisibilityTimeout", cfg.VisibilityTimeout, "the default"); err != nil {
		return err
	}
	if cfg.DeadRetention < 0 {
		return &configError{field: "SweeperConfig.DeadRetention", value: cfg.DeadRetention.String(), fix: "use a positive duration, or 0 to keep dead and failed jobs"}
	}
	for name, d := range cfg.QueueRetention {
		if validQueue(name) != nil {
			return &configError{field: "the queue name (a SweeperConfig.QueueRetention key)", value: strconv.Quote(truncate(name, 70)), fix: "use [a-z0-9_-], 1-64 characters", also: ErrInvalidQueue}
		}
		if d <= 0 {
			return &configError{field: "SweeperConfig.QueueRetention[" + strconv.Quote(name) + "]", value: d.String(), fix: "use a positive duration, or leave the queue out"}
		}
	}
	for kind, d := range cfg.KindRetention {
		if kind == "" || len(kind) > MaxKindLength {
			return &configError{field: "the kind (a SweeperConfig.KindRetention key)", value: strconv.Quote(truncate(kind, 70)), fix: fmt.Sprintf("use 1 to %d bytes", MaxKindLength), also: ErrInvalidKind}
		}
		if d <= 0 {
			return &configError{field: "SweeperConfig.KindRetention[" + strconv.Quote(truncate(kind, 70)) + "]", value: d.String(), fix: "use a positive duration, or leave the kind out"}
		}
	}
	return nil
}
