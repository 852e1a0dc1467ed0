// This file holds periodic jobs: the Schedule interface and the Every interval, the
// PeriodicJob a worker declares, and the admin calls over the stored schedules. The
// engine (the validation, the runner that enqueues each due occurrence exactly once, with
// no leader, and the statements) is internal/periodic.

package skiplock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/skiplock/skiplock/internal/enqueue"
	"github.com/skiplock/skiplock/internal/periodic"
)

// Schedule says when a periodic job runs: Next returns the first occurrence after t.
// [Every] gives a fixed interval; the package github.com/skiplock/skiplock/cron parses
// cron expressions. A Schedule that is also a fmt.Stringer is described by its String in
// the periodic table; a changed description makes the schedule start over from its next
// occurrence after now (or from the old schedule's coming occurrence, if sooner), and
// the worker logs a warning: workers that declare one name with different schedules (a
// rolling deploy) take turns replacing it (docs/periodic.md).
type Schedule = periodic.Schedule

// Every returns a Schedule with an occurrence every d, on whole multiples of d since
// 0001-01-01 UTC as time.Truncate counts them (for a d that divides a day the same as
// from the Unix epoch: Every of a minute runs on the minute; of 168 hours, on Mondays at
// 00:00 UTC), so every worker computes the same occurrences. d must
// be positive; [NewWorker] refuses a PeriodicJob with a non-positive interval.
func Every(d time.Duration) Schedule { return periodic.Every(d) }

// Misfire says what a periodic job does with occurrences missed while no worker ran it
// (an occurrence is missed when it is more than [PeriodicJob].MisfireAfter late).
// Occurrences less late than that are on time and always enqueued.
type Misfire = periodic.Misfire

// The misfire policies.
const (
	// MisfireRunOnce enqueues one job for all the missed occurrences (the latest), unless
	// an occurrence on time is enqueued anyway. The default.
	MisfireRunOnce = periodic.MisfireRunOnce
	// MisfireSkip drops missed occurrences: the job next runs at its next occurrence.
	MisfireSkip = periodic.MisfireSkip
	// MisfireBackfill enqueues the latest [PeriodicJob].BackfillLimit missed occurrences,
	// each with RunAt set to its scheduled time.
	MisfireBackfill = periodic.MisfireBackfill
)

// Defaults of [PeriodicJob].
const (
	// DefaultMisfireAfter is the default of [PeriodicJob].MisfireAfter.
	DefaultMisfireAfter = periodic.DefaultMisfireAfter
	// DefaultBackfillLimit is the default of [PeriodicJob].BackfillLimit.
	DefaultBackfillLimit = periodic.DefaultBackfillLimit
)

// PeriodicJob is a job a worker enqueues on a schedule. Declare it in
// [WorkerConfig].PeriodicJobs of every worker that may enqueue it: the schedule's state
// lives in the database, and any of those workers enqueues each occurrence, exactly once.
type PeriodicJob struct {
	// Name identifies the schedule across workers and deploys (1-128 bytes of UTF-8, no
	// NUL). Renaming a schedule makes a new one. Required.
	Name string
	// Schedule says when it runs. Required.
	Schedule Schedule
	// Args is the job enqueued at each occurrence. Required.
	Args JobArgs
	// Options for each job; nil means the args' defaults. RunAt must be zero: each job's
	// RunAt is its occurrence. Without UniqueKey or Unique, each job gets a unique key
	// made of Name and the occurrence, counted in every state, so no occurrence can be
	// enqueued twice; with them, the caller's uniqueness applies instead.
	Options *EnqueueOptions
	// Misfire is the policy for missed occurrences. Defaults to MisfireRunOnce.
	Misfire Misfire
	// BackfillLimit is how many missed occurrences MisfireBackfill enqueues. Defaults to
	// [DefaultBackfillLimit] (10); zero means the default, negative is an error.
	BackfillLimit int
	// MisfireAfter is how late an occurrence may be enqueued and still be on time.
	// Defaults to [DefaultMisfireAfter] (1m); zero means the default; negative, or under
	// one second (the runner looks for due occurrences every second, so a shorter one
	// would count most occurrences missed), is an error.
	MisfireAfter time.Duration
}

// periodicEntries checks the PeriodicJobs of a worker and prepares them for the runner.
func periodicEntries(c *Client, jobs []PeriodicJob) (map[string]*periodic.Entry, error) {
	specs := make([]periodic.Spec, len(jobs))
	for i, p := range jobs {
		specs[i] = periodic.Spec{Name: p.Name, Schedule: p.Schedule, Misfire: p.Misfire, BackfillLimit: p.BackfillLimit,
			MisfireAfter: p.MisfireAfter, Prepare: func(at time.Time) (enqueue.Job, error) {
				if at.IsZero() {
					return c.prepare(p.Args, p.Options)
				}
				var opts EnqueueOptions
				if p.Options != nil {
					opts = *p.Options
				}
				opts.RunAt = at
				return c.prepare(p.Args, &opts)
			}}
		if p.Options != nil {
			specs[i].RunAt = p.Options.RunAt
		}
	}
	entries, err := periodic.Validate(specs)
	var bad *periodic.InvalidError
	switch {
	case !errors.As(err, &bad):
		return entries, err
	case bad.Err != nil:
		return nil, fmt.Errorf("%w: WorkerConfig.PeriodicJobs[%d] (%q): %w", ErrInvalidConfig, bad.Index, truncate(bad.Name, 40), bad.Err)
	default:
		return nil, &configError{field: fmt.Sprintf("WorkerConfig.PeriodicJobs[%d].%s", bad.Index, bad.Field), value: bad.Value, fix: bad.Fix}
	}
}

// PeriodicInfo is a periodic schedule as stored, for [Client.ListPeriodic]: its Name,
// the Kind and Queue of its job, the Schedule's and the Misfire policy's descriptions,
// NextRunAt, LastRunAt and LastJobID (zero until an occurrence is enqueued), Active
// (false once no running worker has declared it for a minute: it is not enqueued until a
// worker declares it again), DeclaredAt, UpdatedAt, and Disabled (an operator turned it
// off with [Client.SetPeriodicEnabled]).
type PeriodicInfo = periodic.Info

// ListPeriodic returns every periodic schedule ever declared in the schema, by name.
func (c *Client) ListPeriodic(ctx context.Context) ([]PeriodicInfo, error) {
	return periodic.List(ctx, c.db)
}

// SetPeriodicEnabled turns the periodic schedule name off (enabled false: workers
// enqueue none of its occurrences) or on again (the occurrences it missed meanwhile are
// handled by its Misfire policy: MisfireRunOnce enqueues one). The setting is the
// schema's, for every worker, and outlives their restarts. It returns
// [ErrPeriodicNotFound] when no worker ever declared a schedule of that name.
func (c *Client) SetPeriodicEnabled(ctx context.Context, name string, enabled bool) error {
	return periodic.SetEnabled(ctx, c.db, name, enabled)
}

// RunPeriodicNow makes the next occurrence of the periodic schedule name due now: a
// worker declaring it enqueues its job within about a second, and the schedule keeps
// its times: the occurrence after is the one it had (cron and Every schedules are
// aligned to the clock). It returns [ErrPeriodicNotFound] when no enabled schedule has that
// name (enable a disabled one first), and when the schedule is inactive (no running
// worker has declared it for a minute, so none would enqueue it; [PeriodicInfo].Active
// is false): the error's message says which.
func (c *Client) RunPeriodicNow(ctx context.Context, name string) error {
	return periodic.RunNow(ctx, c.db, name)
}
