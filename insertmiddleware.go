// This file names what an insert middleware is and sees ([Config].InsertMiddleware); the
// engine runs them in internal/enqueue (rewrite.go).

package skiplock

import "github.com/skiplock/skiplock/internal/jobtype"

// InsertMiddleware rewrites a job before it is written ([Config].InsertMiddleware). See
// [jobtype.InsertMiddleware].
type InsertMiddleware = jobtype.InsertMiddleware

// InsertJob is a job being enqueued, as an [InsertMiddleware] sees and changes it.
type InsertJob = jobtype.InsertJob
