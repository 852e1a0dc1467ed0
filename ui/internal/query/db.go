// Package query holds the dashboard's own SQL and the reads and writes that run it: the
// windowed and index-served job lists, a job's extra columns, deletes, the running jobs,
// the workflows list, the bulk actions' batches, a job's steps and signals, the throughput of the last hour, the wait
// and run times of the last day and the audit log.
// Reads the public [skiplock.Client] methods cover (Stats, Get, Cancel, Requeue) go
// through them instead. Every statement is rendered once, with the schema quoted in, when
// the [DB] is built.
package query

import (
	"time"

	"github.com/skiplock/skiplock"
)

// DB is the dashboard's database access for one client's schema. It is safe for
// concurrent use.
type DB struct {
	Stats     Stats        // the queue counts
	Lists     *Lists       // the jobs and dead pages' lists
	Jobs      *Jobs        // one job's extra columns, run now, deletes
	Running   *Running     // the running jobs of the workers page
	Workflows *Workflows   // the newest workflows
	Bulk      *Bulk        // the bulk actions' counts and batches
	Hour      *Throughput  // the jobs finished per minute over the last hour
	Timing    *Timing      // the wait and run times of a queue's archived jobs
	Audit     *Audit       // the audit log
	Errors    *ErrorGroups // the dead page's jobs by error
	Search    *Search      // the search page's whole-table search and kind picker
	RunOrder  *RunOrder    // a queue's queued jobs in claim order
	Durable   *Durable     // a job's steps and signals, bounded
}

// New returns the DB of client's schema. statsMaxAge is how old the queue counts may be
// (see [Stats]).
func New(client *skiplock.Client, statsMaxAge time.Duration) *DB {
	pool, x := client.Pool(), schemaSQL(client.Schema())
	stats := Stats{client: client, maxAge: statsMaxAge}
	return &DB{
		Stats:     stats,
		Lists:     newLists(pool, x, stats),
		Jobs:      newJobs(pool, x),
		Running:   newRunning(pool, x),
		Workflows: newWorkflows(pool, x),
		Bulk:      newBulk(pool, x),
		Hour:      newThroughput(pool, x),
		Timing:    newTiming(pool, x),
		Audit:     newAudit(pool, x),
		Errors:    newErrorGroups(pool, x),
		Search:    newSearch(pool, client.Schema(), x),
		RunOrder:  newRunOrder(pool, x),
		Durable:   newDurable(pool, x),
	}
}
