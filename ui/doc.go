// Package ui is skiplock's operator dashboard: an [http.Handler] that shows the queues,
// the jobs and their errors, and acts on them (retry, cancel, delete, requeue many).
//
// It is served two ways: by the command line (`skiplock ui`), or mounted by a service
// under its own path and its own authentication:
//
//	h, err := ui.New(ui.Config{Client: client, Prefix: "/admin/jobs", ExternalAuth: true})
//	mux.Handle("/admin/jobs/", requireAdmin(h))
//
// # Pages
//
//   - Queues (/queues): jobs by queue and status, each count a link to its jobs, the age
//     of each queue's oldest due job, and the jobs finished per minute over the last hour
//     beside those that failed for good (an SVG plot drawn on the server; a lone spike
//     does not set its axis). Sortable by backlog, dead count, oldest due. The table
//     refreshes itself every [Config].RefreshInterval by fetching a server-rendered
//     fragment; the counts come from [skiplock.Client.CachedStats].
//   - A queue (/queue?name=Q): how long its jobs waited for a worker and ran, p50, p95
//     and max, and how many failed, over 5 minutes, an hour, a day and a week, per kind,
//     with SVG charts, from the histograms the maintenance leader rolls up per minute and
//     quarter of an hour (ui_timing_rollup, migration 19) and the archive's newest minutes.
//   - Jobs (/jobs): newest first, filtered by status, queue and kind, or by a piece of
//     the args or metadata (searched in a bounded window), over the hot table and the
//     archive together, paged with a keyset on the id; /jobs?id=N opens job N. A status
//     filter of queued, running, dead or failed reaches its rows through that status's
//     partial index. Listed by such a status, selected rows or every job a filter
//     matches (after a confirmation with the count; run in batches) are cancelled,
//     deleted or requeued, as the status allows.
//   - Search (/search): the jobs table and archive by args, metadata or error text, or
//     JSON the args contain, a bounded window of ids per page, with queue and kind
//     pickers read from the stats and the planner's statistics.
//   - A job (/jobs/{id}): a timeline of its attempts and their workers, its args, its
//     progress and output formatted, its metadata (skiplock's own fields behind a
//     toggle), deadline and concurrency keys, its attempt history with each duration,
//     error and stack, and the actions retry now, retry with edited args, reschedule,
//     cancel and delete.
//   - Dead and failed (/dead): select many jobs, or every job a filter matches (after a
//     confirmation with the count; run in batches), and requeue or delete them.
//   - Workers (/workers): the registered workers and the jobs running now with their
//     progress; selected running jobs are cancelled together.
//   - Audit (/audit): the recent actions of every instance, who did them and the outcome,
//     and the refused forgeries; kept in the bounded ui_audit table (migration 12).
//   - Periodic (/periodic): schedules with their last and next run and their state
//     (active, inactive, disabled), when a [PeriodicSource] is configured; run now,
//     disable and enable when it is a [PeriodicController].
//
// # Safe by default
//
// The handler answers only to the loopback host names, the IP address a request reached,
// and [Config].AllowedHosts: any other Host header gets 421 before anything else, and a
// POST whose Origin names another host gets 403, so a web page on a domain re-pointed
// to this machine (DNS rebinding) can neither read nor act. A token login starts a random
// session kept in the handler's memory that ends after [Config].SessionIdle without use,
// at [Config].SessionMaxAge, or at sign-out. The right token or password is always
// checked and accepted; wrong ones back off per credential (429 with a Retry-After that
// doubles while the guessing goes on), so guessing from many addresses, or through one
// proxy, locks no one out. Cookies are HttpOnly, SameSite=Strict, and Secure unless the
// request is local over plain HTTP.
//
// Without [Config].Token or [Config].BasicAuth, the handler serves only local requests
// (a loopback connection with no proxy header, and only when [Config].TrustLoopback says
// no proxy on this machine forwards to it), unless [Config].ExternalAuth says a middleware
// in front of it authenticates every request; by default it serves none. Proxy headers
// are believed only from [Config].TrustedProxies. Every action is a POST carrying
// a CSRF token bound to a cookie the handler signs; [Config].ReadOnly refuses them all and hides their
// buttons. Every value from the database goes through html/template, so a job whose args
// hold <script> shows it as text, and a strict Content-Security-Policy allows only the
// handler's own embedded script and stylesheet. Page sizes and filter values are bounded,
// every listing query examines a bounded number of rows (the search page, which reads
// what no index holds, stops at a page's worth of matches), and each request's database
// work stops after [Config].QueryTimeout.
//
// # Extension points
//
// Queue pause/resume and running-versus-limit columns appear when [Config].Queues is set
// (a [QueueSource], optionally also a [QueueController]); the periodic page appears when
// [Config].Periodic is set. Columns added to the jobs tables later (metadata, progress,
// output) show on the job page without any change here.
package ui
