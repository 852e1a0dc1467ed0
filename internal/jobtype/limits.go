package jobtype

import "time"

// QueueLimits are a queue's flow-control limits. They hold across every worker of every
// process that works the queue: they are kept by the database, not by one process. The
// zero value means no limit at all: the queue takes the plain claim path, whose cost
// flow control does not change.
//
// Limits are declared per queue in QueueConfig.Limits, and may be replaced at run time
// with Client.SetQueueLimits (every worker picks the change up at once through the
// control channel, and after a reconnect of its listener, or within a minute otherwise).
//
// A queue whose only limit is Concurrency claims through slot rows, side by side with
// other claims; any other limit makes the queue's claims take turns under a lock (see
// docs/flow-control.md for both and their costs).
type QueueLimits struct {
	// Concurrency is the most jobs of the queue running at once, across all workers.
	// Zero means no global limit; negative, or above 100000 (the queue keeps a slot row
	// per unit of it), is an error. [QueueConfig].MaxWorkers still bounds each worker.
	Concurrency int
	// KeyConcurrency is the most jobs running at once per partition key
	// (EnqueueOptions.PartitionKey), across all workers. Jobs without a key share one
	// key of their own. Zero means no per-key limit; negative is an error.
	KeyConcurrency int
	// Rate is the most job starts per RatePeriod, across all workers: a token bucket in
	// the database that holds at most Rate tokens and refills at Rate per RatePeriod;
	// every start takes one token. Starts are counted, not completions: a retry is a new
	// start. Zero means no rate limit; negative is an error.
	Rate int
	// RatePeriod is the window of Rate, in whole milliseconds (at least 1ms). Defaults to
	// one second when Rate is set; zero means the default; negative, or with a fraction
	// of a millisecond, is an error.
	RatePeriod time.Duration
	// KeyRate is the most job starts per KeyRatePeriod per partition key
	// (EnqueueOptions.PartitionKey), across all workers: a token bucket per key in the
	// database that holds at most KeyRate tokens and refills at KeyRate per
	// KeyRatePeriod; every start of a job of the key takes one of its tokens. A key's
	// bucket starts full (a key seen for the first time may start KeyRate jobs at once).
	// Jobs without a key share one bucket of their own. Starts are counted, not
	// completions. Zero means no per-key rate limit; negative is an error.
	KeyRate int
	// KeyRatePeriod is the window of KeyRate, in whole milliseconds (at least 1ms).
	// Defaults to one second when KeyRate is set; zero means the default; negative, or
	// with a fraction of a millisecond, is an error.
	KeyRatePeriod time.Duration
	// ConcurrencyKeys are per-dimension concurrency limits, by dimension: the most jobs
	// running at once per key of the dimension, across all workers. {"region": 50,
	// "account": 2} lets at most 50 jobs whose EnqueueOptions.ConcurrencyKeys["region"]
	// is "eu" run at once (and 50 of "us"), and at most 2 per account. A job counts
	// against each of its keys, and starts only when every one of them is under its
	// dimension's limit (and its partition key under KeyConcurrency). A job without a key
	// in a dimension is not limited by that dimension; its keys in dimensions without a limit
	// here count against nothing. Names are [a-z0-9_-], 1-64 characters; at
	// most 8 dimensions; each limit at least 1. Nil means none. The map is copied by
	// QueueConfig and Client.SetQueueLimits, not kept.
	ConcurrencyKeys map[string]int
	// Fair hands the queue's jobs out round-robin across partition keys: each claim takes
	// an equal share from every key that has due jobs (and free per-key slots), so a key
	// with a huge backlog cannot starve a key with a few jobs. Within a key, jobs go in
	// priority and run_at order; across keys, priority does not apply.
	Fair bool
}
