// Package skiplock is a job queue for Go services that already run PostgreSQL.
//
// Jobs live in a Postgres table. A service enqueues them inside its own business
// transaction with [Client.EnqueueTx]: if the transaction rolls back there is no job, if it
// commits there is — no dual write to a broker, no outbox. A [Worker] claims due jobs with
// one FOR UPDATE SKIP LOCKED statement, in batches, runs the typed handler registered for
// each kind with [Handle], and records the outcome. LISTEN/NOTIFY wakes workers at once;
// a fallback poll catches everything notifications miss.
//
// # A tour
//
// The path of the [getting started] page, which has the whole program: migrate, make a
// client, enqueue inside your transaction, register a typed handler, run a worker.
//
//	pool, _ := pgxpool.New(ctx, os.Getenv("DATABASE_URL")) // MaxConns of 20 or so: see below
//	_ = skiplock.Migrate(ctx, pool)                         // safe from every process
//	client, _ := skiplock.NewClient(pool, skiplock.Config{})
//	_ = client.CheckSchema(ctx) // fails at start-up on an unmigrated schema
//
//	tx, _ := pool.Begin(ctx)
//	// ... insert the order with tx ...
//	_, _ = client.EnqueueTx(ctx, tx, SendEmail{OrderID: 42}, nil)
//	_ = tx.Commit(ctx) // the order and its job, or neither
//
//	w, _ := skiplock.NewWorker(client, skiplock.WorkerConfig{
//		Queues: map[string]skiplock.QueueConfig{"default": {MaxWorkers: 100}},
//	})
//	_ = skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[SendEmail]) error {
//		return send(ctx, job.Args)
//	})
//	_ = w.Run(ctx) // until ctx is cancelled; then a graceful shutdown
//
// A job kind is any JSON-marshalable type with a Kind method. The worker needs 8 pooled
// connections for its own statements with one queue (it warns when MaxConns is lower),
// plus what its handlers use. Handlers must be idempotent: execution is at least once.
// Every way to enqueue is in [enqueueing]; handlers, middleware and timeouts in
// [workers and handlers].
//
// # States
//
// A job is queued, then running while a worker holds it, then one of:
//
//   - succeeded: the handler returned nil. By default the row moves to jobs_archive
//     (see [Completion]; per queue [QueueConfig].Completion, per kind [KindConfig]), and
//     the sweeper deletes it after the retention (ArchiveRetention, per queue or kind
//     Retention);
//   - queued again with a later run_at: the handler failed and attempts remain; the delay
//     comes from the [RetryPolicy] (jittered exponential backoff by default);
//   - dead: the handler failed and the attempts are used up;
//   - failed: the handler returned [Permanent] (or the payload did not decode): no retry;
//   - cancelled: [Client.Cancel], or the handler returned [CancelJob].
//
// [Snooze] puts a job back for later without using an attempt. A handler panic is
// recovered and recorded, with its stack, as a failed attempt. A job whose kind has no
// handler is a failed attempt too, retried with backoff, so a rolling deploy heals.
// [Client.Requeue] brings dead and failed jobs back ([failures and retries]). [Client.ListPage] pages through the
// jobs table and the archive by a keyset cursor, with filters; [Client.Delete] and
// [Client.DeleteMany] remove queued and finished jobs, never a running one.
//
// [Use] and [UseKind] wrap handlers with middleware, in order (a transaction per job, a
// tenant context); [HandleErrors] sees every failed attempt, a panic as a [PanicError]
// with its stack, and every handler stuck past its timeout. [Client.EnqueueSQLTx]
// enqueues inside a database/sql transaction on pgx's stdlib driver.
//
// # Job control
//
// [UniqueOpts] makes a job unique by its kind, args, queue and time bucket, counting the
// states it names (a duplicate returns the existing job with [JobRow].Duplicate set).
// [Client.PauseQueue] stops every worker claiming from a queue until
// [Client.ResumeQueue]. [WorkerConfig].PeriodicJobs enqueues jobs on a [Schedule] ([Every],
// or a cron expression from the cron sub-package), each occurrence exactly once across
// workers, with the schedule's state kept in the database. [Worker.AddQueue],
// [Worker.RemoveQueue] and [Worker.SetMaxWorkers] change a running worker's queues
// without a restart.
//
// # Guarantees
//
// Two workers never hold the same attempt of a job: the claim is one atomic statement that
// takes a fencing token (a per-row counter that never goes back), and every later write is
// fenced on (id, token, locked_by), so a stale worker, or a statement replayed after a lost
// reply, changes nothing. Each claim writes the claiming worker's lease in the row
// (now() + its VisibilityTimeout) and heartbeats renew it. Ownership goes by liveness:
// a job is never taken from a worker whose row in the workers table (its worker lease,
// 10 s, renewed every 1.7–3 s) is alive, whatever its handler does; every worker takes
// back, counting the lost attempt, the jobs of workers whose lease ended, and the
// [Sweeper] those of workers without a row (an earlier release) whose job lease ended.
// Every attempt has a timeout ([WorkerConfig].JobTimeout, cause [ErrJobTimeout]),
// every statement of the engine a time limit, and a worker that cannot renew its lease
// cancels its handlers before it can end. Execution is at least once: a job whose
// worker dies is taken back about 10 s later and run again, so handlers must be
// idempotent — or make their effect exactly once with [CompleteTx], which commits the
// job's success in the handler's own transaction, fenced on the attempt's token
// ([JobRow].Fence). Every enqueued job reaches a final state or stays visibly
// queued or running. Each promise and the test that proves it: [ownership and guarantees].
//
// # Observing and testing
//
// [Config].Hooks see every enqueue ([EnqueueHook]) and every attempt with its [Outcome];
// the module github.com/skiplock/skiplock/otel builds OpenTelemetry traces and metrics on
// them. [EnqueueOptions].Metadata travels with a job (user tags, a trace context). A
// handler reports progress with [RecordProgress] (written by the heartbeat) and a result
// with [SetOutput] (written with its success); [Client.Get] shows both. [Client.Stats]
// counts the archive's recent jobs too, and [Client.CachedStats] shares one stats query
// among all processes ([observability]). Package skiplocktest asserts what was enqueued,
// runs jobs in the test's goroutine with the real handlers, and moves the schema's
// clock ([testing]).
//
// # Concurrency and cost
//
// [Client], [Worker] and [Sweeper] are safe for concurrent use. Enqueue costs at most one
// statement, and concurrent calls outside a transaction share one statement and one
// commit ([Config].CoalesceWindow); each still returns after its own job is committed.
// [Client.EnqueueMany] costs a constant number (COPY) whatever the count. A worker
// claims up to its free slots per statement and records successes and failures in
// batches. An idle
// worker costs the database one poll statement per PollInterval for all of its queues,
// however many; the sweep and other per-fleet maintenance run on one elected worker at a
// time ([many hosts]).
//
// # Inside a worker
//
// A worker is a few parts, each built by [NewWorker] with the collaborators it needs and
// each started by [Worker.Run] in one declared order and stopped in the reverse one: the
// lease (heartbeats and their watchdog), the success and failure batches, the pause and
// flow watchers, the leader election and the per-fleet maintenance, the listener, the
// executor, the periodic runner, the poller and the claim loops. A claimed job goes from
// a queue's claim loop to one of its runners, and its handler's result goes, in one call,
// to the outcome recorder, which decides whether it is written as a success, as a
// failure, put back (cut off by shutdown) or dropped (no longer held). The
// [architecture] page walks a job through the files in that order. The queues are a set the
// running parts read: [Worker.AddQueue] starts a queue's claim loops within the claim
// loops' part and its runners within the executor, [Worker.RemoveQueue] stops them, and
// Run's shutdown stops and waits for those of every queue, whenever it was added.
//
// # Flow control
//
// [QueueConfig].Limits caps a queue across every worker of every process: running jobs
// in all ([QueueLimits].Concurrency), per partition key ([EnqueueOptions].PartitionKey)
// and per key of further dimensions (a job counts against each of its
// [EnqueueOptions].ConcurrencyKeys), job starts per period, and round-robin sharing
// across keys. The limits are kept exactly
// by the database at READ COMMITTED; [Client.SetQueueLimits] changes them on every worker
// at run time. A queue without limits claims exactly as if the feature did not exist
// ([flow control]).
//
// # Workflows, batches and sequences
//
// [Client.EnqueueWorkflow] enqueues a DAG of tasks: a task becomes a job when every task
// it depends on has succeeded, inserted by the transaction that records the last of
// those successes ([OnFailure] says what a failed dependency does). [Client.EnqueueBatch]
// enqueues jobs with a callback that runs once, when all have finished, with the counts
// by outcome ([BatchCountsOf]). [Client.EnqueueSequence] runs the jobs of one key in
// order, one at a time ([workflows]).
//
// # The manual
//
// The manual is the docs folder of the repository, one page per topic in reading order:
// [getting started], [enqueueing], [workers and handlers], [failures and retries],
// [ownership and guarantees], [configuration], [flow control], [periodic jobs],
// [workflows], [operating], [many hosts], [observability], [dashboard], [testing],
// [performance], [architecture], [coming from River, Oban or pg-boss] and a [FAQ].
//
// [getting started]: https://github.com/skiplock/skiplock/blob/main/docs/getting-started.md
// [enqueueing]: https://github.com/skiplock/skiplock/blob/main/docs/enqueueing.md
// [workers and handlers]: https://github.com/skiplock/skiplock/blob/main/docs/workers.md
// [failures and retries]: https://github.com/skiplock/skiplock/blob/main/docs/failures.md
// [ownership and guarantees]: https://github.com/skiplock/skiplock/blob/main/docs/guarantees.md
// [configuration]: https://github.com/skiplock/skiplock/blob/main/docs/configuration.md
// [flow control]: https://github.com/skiplock/skiplock/blob/main/docs/flow-control.md
// [periodic jobs]: https://github.com/skiplock/skiplock/blob/main/docs/periodic.md
// [workflows]: https://github.com/skiplock/skiplock/blob/main/docs/workflows.md
// [operating]: https://github.com/skiplock/skiplock/blob/main/docs/operating.md
// [many hosts]: https://github.com/skiplock/skiplock/blob/main/docs/many-hosts.md
// [observability]: https://github.com/skiplock/skiplock/blob/main/docs/observability.md
// [dashboard]: https://github.com/skiplock/skiplock/blob/main/docs/dashboard.md
// [testing]: https://github.com/skiplock/skiplock/blob/main/docs/testing.md
// [performance]: https://github.com/skiplock/skiplock/blob/main/docs/performance.md
// [architecture]: https://github.com/skiplock/skiplock/blob/main/docs/architecture.md
// [coming from River, Oban or pg-boss]: https://github.com/skiplock/skiplock/blob/main/docs/coming-from.md
// [FAQ]: https://github.com/skiplock/skiplock/blob/main/docs/faq.md
package skiplock
