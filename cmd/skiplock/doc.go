// Command skiplock is the operator tool of the skiplock job queue: it migrates the schema,
// shows what the queues hold and one job in full, lists dead and failed jobs with their
// last errors, puts them back in the queue, cancels jobs, shows a durable job's steps,
// signals jobs and forks them from a step, and changes queues' flow-control limits.
//
// Usage:
//
//	skiplock [global flags] <command> [command flags]
//
// Commands:
//
//	migrate up [--target N]        apply pending migrations (up to version N; default: all)
//	migrate down --target N        revert migrations down to version N
//	migrate down --target 0 --yes  revert every migration: drops skiplock's tables and all jobs
//	migrate status                 show the current, latest and applied versions
//	stats [--json]                 jobs by queue and status, the oldest due job's age, jobs finished lately
//	get --id N [--json]            show one job: state, args, metadata, progress, output, last error
//	dead [--status dead|failed] [--queue Q] [--kind K] [--limit N] [--json]
//	                               list dead and failed jobs, oldest first, with their last errors
//	requeue [--id 1,2,3] [--kind K] [--queue Q]
//	                               put dead and failed jobs back in the queue, attempts reset
//	cancel --id N                  cancel a queued or running job
//	steps [--json] ID              list a durable job's steps and signals
//	signal ID NAME [JSON]          send a signal to a job (AwaitSignal)
//	fork ID STEP                   enqueue a job again from one of its steps
//	limits [--queue Q (--concurrency N | --key-concurrency N | --rate N [--rate-period D] | --key-rate N [--key-rate-period D] | --key-limit DIM=N | --fair | --none)... | --queue Q --reset]
//	                               show, set or reset a queue's flow-control limits on every worker
//	ui [--listen ADDR] [--allowed-host NAMES] [--read-only] [--token T | --basic-auth USER:PASS | --trust-loopback] [--trusted-proxy ADDRS]
//	                               serve the operator dashboard (default http://127.0.0.1:8080/)
//	version                        print the build's version
//	help [command]                 print the usage, or a command's
//
// Global flags, accepted before the command and after it:
//
//	--database-url URL  the PostgreSQL connection string; defaults to $DATABASE_URL
//	--schema NAME       the schema holding skiplock's tables; defaults to "skiplock"
//	--timeout D         the time limit of the whole command; defaults to 30s
//
// Connecting gives up after at most 5 seconds (less when --timeout is shorter, more only
// when the URL's connect_timeout says so).
//
// Exit status: 0 when the command did its work; 1 when it failed (the database cannot be
// reached or returned an error, a job does not exist, the command timed out); 2 for a usage
// error (an unknown command or flag, a bad or missing flag value, no database URL).
package main
