// Package periodic is the engine of periodic jobs: the schedules (Schedule, Every, the
// misfire policies), the validation of the jobs a worker declares, and the Runner, which
// records the declared schedules in the periodic table and enqueues each due occurrence
// exactly once, with no leader: whichever worker locks a due row enqueues its job and
// moves the row on in one transaction. It also holds the statements of the root's
// ListPeriodic, SetPeriodicEnabled and RunPeriodicNow. The root's PeriodicJob reaches it
// as a Spec, whose Prepare callback builds each occurrence's job.
package periodic
