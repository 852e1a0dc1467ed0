// This file holds the per-job options (EnqueueOptions, an args type's defaults, the
// sequence policy, EnqueueParams) and the preparation of a job from its args and options
// for the enqueue engine (internal/enqueue, which checks them and runs the statements).

package skiplock

import (
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/skiplock/skiplock/internal/enqueue"
	"github.com/skiplock/skiplock/internal/jobtype"
)

// EnqueueOptions are per-job settings. The zero value of each field means its default.
type EnqueueOptions struct {
	// Queue is the queue name ([a-z0-9_-], 1-64 characters). Defaults to "default".
	Queue string
	// Priority orders due jobs of a queue: higher runs first. Defaults to 0.
	Priority int
	// RunAt is the earliest time the job may start. Zero means now, by the database clock.
	RunAt time.Time
	// MaxAttempts is how many times the job may run before it is dead. Defaults to
	// [DefaultMaxAttempts] (20); zero means the default, negative or more than 1000000 is
	// an error.
	MaxAttempts int
	// UniqueKey, when set, allows only one queued or running job with this key: a second
	// enqueue returns the existing job (Duplicate set) and [ErrDuplicateJob]. At most 255
	// bytes. Set UniqueKey or Unique, not both.
	UniqueKey string
	// Unique makes the job unique by its kind, args, queue and time bucket, in the states
	// it names; a duplicate enqueue returns the existing job with Duplicate set and a nil
	// error. Nil means not unique (unless UniqueKey is set).
	Unique *UniqueOpts
	// Timeout bounds each attempt of this job, overriding the kind's Timeout method and
	// [WorkerConfig].JobTimeout (see there). Zero means those; negative is an error.
	// Stored in milliseconds.
	Timeout time.Duration
	// Metadata is stored with the job and readable in handlers and hooks
	// ([JobRow].Metadata): user tags, and the trace context a tracing hook adds. Keys
	// must be non-empty; keys and values UTF-8 without NUL; at most 16 KiB as JSON. Keys
	// starting with "skiplock_" are skiplock's own (workflow, batch and sequence marks)
	// and are refused with [ErrInvalidOptions]. An args type's default metadata and the
	// call's are merged key by key, the call's winning. Nil means none. The map is
	// copied, not kept.
	Metadata map[string]string
	// PartitionKey puts the job in a flow-control partition (a tenant, a customer): a
	// queue's per-key limit and fair sharing ([QueueLimits]) act per key. At most 255
	// bytes. Defaults to none. To take it from the args' fields, give the args type an
	// EnqueueOptions method ([JobArgsWithOptions]) that returns it.
	PartitionKey string
	// ConcurrencyKeys are the job's keys in further flow-control dimensions, by
	// dimension: {"region": "eu", "account": "a-7"}. A queue's per-dimension limits
	// ([QueueLimits].ConcurrencyKeys) count the job against each of its keys while it runs,
	// and start it only when every one is under its limit. At most 8 dimensions, named
	// [a-z0-9_-] (1-64 characters); keys of 1-255 bytes. An args type's keys and the
	// call's are merged dimension by dimension, the call's winning. Not for workflow
	// tasks or sequences. Nil means none; the map is not kept. See docs/flow-control.md.
	ConcurrencyKeys map[string]string
	// SequenceOnFailure is what a failed attempt of this job does to the sequence it was
	// enqueued in ([Client.EnqueueSequenceTx]): [SequenceHold] (the zero value) or
	// [SequenceMoveOn]. Other enqueues refuse it.
	SequenceOnFailure SequencePolicy
	// Encrypt seals the job's args with the client's [Keyring] (AES-GCM, its current
	// key): the jobs table, its backups, the CLI and the dashboard see only ciphertext and
	// the key's id, and a worker opens them just before the handler decodes them.
	// Metadata, the kind, the queue and a unique key are not encrypted (a UniqueOpts key
	// over the args is a hash of the plaintext: equal args give equal keys), nor is what
	// the job records as it runs: its output, errors, durable step results, signal
	// payloads and log records. Needs
	// [Config].Keyring. An args type can set it for every job of its kind
	// ([JobArgsWithOptions]).
	Encrypt bool
	// DependsOn makes the job wait until the jobs with these ids (already enqueued, by
	// any enqueue) have succeeded: it is inserted queued with run_at 9999-12-31 (UTC), so no
	// worker claims it, and the transaction that records its last parent's success gives
	// it back its RunAt. A parent archived after its success counts as succeeded. What a
	// parent that ends otherwise (failed, dead, cancelled, or deleted before it ran) does
	// is OnDependencyFailure. An id found neither in jobs nor in the archive (a purged or
	// deleted job cannot be told from one that never existed) fails the enqueue with
	// [ErrDependencyNotFound], nothing written. For [Client.Enqueue] and
	// [Client.EnqueueTx] only, without UniqueKey or Unique; at most 1,000 ids. The
	// enqueue holds each unfinished parent's row until its transaction ends, so a
	// parent's outcome (and its heartbeat) waits for it: keep such a transaction short.
	// See docs/workflows.md, "Depending on existing jobs". Nil means none.
	DependsOn []int64
	// Deadline is the time after which no attempt of the job starts, by the database
	// clock: a worker that claims it later ends it as failed with [ErrDeadlineExceeded]
	// in its error history, without running it and without counting an attempt; a
	// running attempt's context ends at the deadline (with the cause
	// [ErrDeadlineExceeded], like a timeout, whichever comes first) and the job fails
	// without retry; a retry or snooze due after it ends the job as failed instead. It
	// is kept in the job's metadata (the reserved key "skiplock_deadline"), so it holds
	// across retries, restarts and workers, and [JobRow].Deadline shows it. It cannot be
	// changed afterwards ([Client.Update] refuses the reserved key), and [Client.Requeue]
	// and [Client.RetryWorkflow] keep it: a job put back after its deadline fails again
	// at its next claim without running; enqueue a new job to run it then. Zero means
	// none; outside the years 1 to 9999 (UTC) it is refused with [ErrInvalidOptions]. See
	// docs/enqueueing.md, "Deadlines".
	Deadline time.Time
	// OnDependencyFailure is what a parent in DependsOn that does not succeed does to
	// the job: [CancelDependents] (the zero value) cancels it, [RunDependents] counts
	// that parent as settled.
	OnDependencyFailure OnFailure
}

// JobArgsWithOptions is implemented by args types that carry their own default
// [EnqueueOptions] (for example a queue or max attempts for every job of the kind).
// Options passed to an enqueue call override these field by field.
type JobArgsWithOptions interface {
	JobArgs
	EnqueueOptions() EnqueueOptions
}

// SequencePolicy is what a failed attempt of a sequence job does to the jobs enqueued
// after it with the same key ([EnqueueOptions].SequenceOnFailure).
type SequencePolicy int

const (
	// SequenceHold, the zero value, holds the sequence: the next job of the key waits
	// while this one waits for its retries, until it succeeds or ends failed, dead or
	// cancelled. Jobs of the key run strictly one at a time, in order.
	SequenceHold SequencePolicy = iota
	// SequenceMoveOn moves on: the first failed attempt of this job (one that will be
	// retried, or its final failure, death or cancellation) releases the next job of the
	// key, in the transaction that records the failure. The job's own retries then run
	// whenever they are due, out of order, possibly at the same time as later jobs of the
	// key; the jobs after it still run one at a time, each after the previous one's first
	// attempt has ended. A snooze is not a failure.
	SequenceMoveOn
)

// EnqueueParams is one job of an [Client.EnqueueMany] call.
type EnqueueParams struct {
	Args    JobArgs
	Options *EnqueueOptions // nil means defaults
}

// prepareMany prepares every job of params, or returns the first error, naming its job.
func (c *Client) prepareMany(params []EnqueueParams) ([]enqueue.Job, error) {
	jobs := make([]enqueue.Job, len(params))
	for i := range params {
		j, err := c.prepareBulk(params[i])
		if err != nil {
			return nil, fmt.Errorf("job %d of %d: %w", i, len(params), err)
		}
		jobs[i] = j
	}
	return jobs, nil
}

// prepareBulk prepares one job of an EnqueueMany call: as prepare, and refusing the
// options only a single enqueue honours.
func (c *Client) prepareBulk(p EnqueueParams) (enqueue.Job, error) {
	j, err := c.prepare(p.Args, p.Options)
	if err == nil {
		err = j.CheckBulk()
	}
	return j, err
}

// reservedMetadataPrefix starts the metadata keys skiplock writes itself (the workflow,
// task, batch and sequence marks the settle statement and DependencyOutputs read); a
// caller's metadata may not set them.
const reservedMetadataPrefix = "skiplock_"

// prepare validates args and options and marshals the payload. It writes nothing.
func (c *Client) prepare(args JobArgs, opts *EnqueueOptions) (enqueue.Job, error) {
	kind, err := enqueue.ArgsKind(args)
	if err != nil {
		return enqueue.Job{}, err
	}
	o, err := jobOptions(args, opts)
	if err != nil {
		return enqueue.Job{}, err
	}
	for k := range o.Metadata {
		if strings.HasPrefix(k, reservedMetadataPrefix) {
			return enqueue.Job{}, fmt.Errorf("%w: Metadata key %q: keys starting with %q are reserved for skiplock's own marks (workflow tasks, batches, sequences)",
				ErrInvalidOptions, enqueue.Truncate(k, 40), reservedMetadataPrefix)
		}
	}
	j, err := enqueue.Prepare(kind, args, o, c.maxBytes)
	if err == nil {
		err = setDeadline(&j, deadlineOf(args, opts))
	}
	if err != nil || !o.Encrypt {
		return j, err
	}
	if c.keyring == nil {
		return enqueue.Job{}, fmt.Errorf("%w: Encrypt needs Config.Keyring", ErrInvalidOptions)
	}
	j.Sealer = c.keyring.Seal
	return j, nil
}

// deadlineOf is the job's deadline: opts', else the args type's default; zero: none.
func deadlineOf(args JobArgs, opts *EnqueueOptions) time.Time {
	if opts != nil && !opts.Deadline.IsZero() {
		return opts.Deadline
	}
	if d, ok := args.(JobArgsWithOptions); ok {
		return d.EnqueueOptions().Deadline
	}
	return time.Time{}
}

// setDeadline keeps d (unless zero) in j's metadata, under the reserved key
// [jobtype.MetaDeadline], which every insert path carries with the job. The map is copied.
// A deadline outside the years 1 to 9999 (UTC) is refused with [ErrInvalidOptions]: its
// RFC 3339 form, which the metadata holds, cannot be read back, and a worker would see no
// deadline at all.
func setDeadline(j *enqueue.Job, d time.Time) error {
	if d.IsZero() {
		return nil
	}
	if y := d.UTC().Year(); y < 1 || y > 9999 {
		return fmt.Errorf("%w: Deadline %s: the year must be in [1, 9999]", ErrInvalidOptions, d.UTC().Format(time.RFC3339))
	}
	meta := make(map[string]string, len(j.Meta)+1)
	maps.Copy(meta, j.Meta)
	meta[jobtype.MetaDeadline] = jobtype.FormatDeadline(d)
	j.Meta = meta
	return nil
}

// jobOptions merges the args type's default options with opts, for the engine, which
// fills the defaults and checks them.
func jobOptions(args JobArgs, opts *EnqueueOptions) (enqueue.Options, error) {
	var o enqueue.Options
	if opts != nil && opts.SequenceOnFailure != SequenceHold {
		return o, fmt.Errorf("%w: SequenceOnFailure is for EnqueueSequence and EnqueueSequenceTx only", ErrInvalidOptions)
	}
	if opts != nil && len(opts.DependsOn) > 0 {
		return o, fmt.Errorf("%w: DependsOn is for Enqueue and EnqueueTx only (a workflow's tasks name theirs in WorkflowTask.DependsOn)", ErrInvalidOptions)
	}
	if d, ok := args.(JobArgsWithOptions); ok {
		o = d.EnqueueOptions().engine()
	}
	if opts != nil {
		o = enqueue.MergeOptions(o, opts.engine())
	}
	return o, nil
}

// engine returns o as the engine's options (all but SequenceOnFailure, which only the
// sequence enqueues read).
func (o EnqueueOptions) engine() enqueue.Options {
	var u *enqueue.Unique
	if o.Unique != nil {
		e := enqueue.Unique(*o.Unique)
		u = &e
	}
	return enqueue.Options{Queue: o.Queue, Priority: o.Priority, RunAt: o.RunAt, MaxAttempts: o.MaxAttempts,
		UniqueKey: o.UniqueKey, Unique: u, Timeout: o.Timeout, Metadata: o.Metadata, PartitionKey: o.PartitionKey,
		ConcurrencyKeys: o.ConcurrencyKeys, Encrypt: o.Encrypt}
}

// The rest of this file holds unique jobs by what they are: the UniqueOpts an enqueue may carry. The
// key they compute (kind, optionally queue, args and time bucket, hashed) and the inserts
// that honour it are in internal/enqueue.

// UniqueOpts makes a job unique by what it is: at most one job with the same kind (and,
// as chosen, the same queue, args and time bucket) exists in the states that count. A
// duplicate enqueue inserts nothing and returns the existing job with
// [JobRow].Duplicate set and a nil error; [Client.EnqueueMany] skips it and does not
// count it.
//
// Active jobs (queued, running) are arbitrated by a unique index, so concurrent enqueues
// from any number of transactions leave one row. Finished states that count are looked
// up by the same statement among the finished jobs of the jobs table and the archive,
// and once more after the insert, in its transaction, for a holder that finished while
// the insert waited on it (a round trip more; see docs/enqueueing.md).
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
	// length (buckets are whole multiples of it since 0001-01-01 UTC, as time.Truncate
	// counts: for a length that divides a day the same as from the Unix epoch, so 1h
	// buckets start on the hour UTC; 168h buckets start on Mondays).
	// The bucket is that of RunAt when set, else of the enqueuing host's clock. Zero means
	// no bucket; negative is an error.
	ByPeriod time.Duration
	// States are the states in which an existing job blocks a new one. They must include
	// queued and running. Adding succeeded means a job done within the period blocks
	// another: with the default CompletionArchive the archive is searched, and the
	// archive retention bounds how far back; under CompletionDelete a succeeded job
	// leaves no row and cannot count. Defaults to queued and running.
	States []JobStatus
	// Replace: when a queued job (not yet running) holds the key, this enqueue's args
	// replace that job's, and the enqueue returns it with Duplicate and Replaced set. A
	// holder already running (or finished, under States) is kept as it is: Duplicate
	// only. For Enqueue and EnqueueTx; EnqueueMany refuses it.
	Replace bool
	// Debounce delays the job: a new job is due Debounce after it is enqueued (unless
	// RunAt is set), and an enqueue that meets a queued holder pushes the holder's run_at
	// to Debounce after now (never earlier than it was), both by the database's clock, so
	// a burst of enqueues of one key runs once, Debounce after the last. Zero: no
	// debounce; negative is an error.
	// For Enqueue and EnqueueTx; EnqueueMany refuses it.
	Debounce time.Duration
	// MaxDelay bounds Debounce under a steady stream: a holder is never pushed later than
	// MaxDelay after it was first enqueued (its created_at), so it runs at the latest
	// then. Zero: no bound; it needs Debounce, and must be at least Debounce.
	MaxDelay time.Duration
}

// allStatuses lists every job status, for validation.
var allStatuses = enqueue.AllStatuses
