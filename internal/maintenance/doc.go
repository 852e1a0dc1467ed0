// Package maintenance is the sweeper's engine, run by one leader per schema: the sweep
// under its advisory lock (taking back running jobs whose lease ended and whose owner has
// no live worker row), the purges of finished jobs and workflows past retention, the
// pruning of job_waiters rows left behind by cut-off waits, and the vacuum and analyze
// checks of the hot tables.
package maintenance
