package ui

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/skiplock/skiplock"
)

// Config configures a [Handler]. Only Client is required; the zero value of every other
// field is a safe default.
type Config struct {
	// Client is the skiplock client whose schema the dashboard shows. Required.
	Client *skiplock.Client
	// Prefix is the path the handler is mounted at, such as "/admin/jobs", without a
	// trailing slash; the handler strips it from requests and puts it in front of every
	// link. Defaults to "" (mounted at the root).
	Prefix string
	// ReadOnly refuses every action (retry, cancel, delete, requeue, pause) and hides
	// their buttons. Defaults to false.
	ReadOnly bool
	// Token, when set, is required from every request: as "Authorization: Bearer <token>",
	// or as the session cookie the /login page sets after the token is typed there.
	// Empty means no token.
	Token string
	// BasicAuth, when set, accepts HTTP basic authentication with this user and password
	// (either it or the token suffices when both are set). Nil means no basic auth.
	BasicAuth *BasicAuth
	// ExternalAuth says a middleware in front of the handler authenticates every request,
	// so requests from other hosts are served without Token or BasicAuth. When false and
	// neither is set, only local requests (see TrustLoopback) are served; others get 403.
	// Defaults to false.
	ExternalAuth bool
	// TrustLoopback takes a request that reaches the handler over a loopback connection
	// (remote and local address both loopback), without a proxy header and not from one
	// of TrustedProxies, for a user of this machine: it is served without Token or
	// BasicAuth when neither is set (the audit names it "local (loopback)"), and its
	// cookies need not be Secure over plain HTTP. Set it only when nothing on this
	// machine forwards other people's requests to the handler: a reverse proxy on the
	// same host that adds no client header (nginx's plain proxy_pass) would bring every
	// visitor in as local. Defaults to false: no request is local, so without Token,
	// BasicAuth or ExternalAuth every request gets 403, and every cookie is Secure.
	TrustLoopback bool
	// TrustedProxies are the addresses of the reverse proxies in front of the handler,
	// as IPs or CIDR prefixes ("127.0.0.1", "10.0.0.0/8"). A request from one of them is
	// never local; the audit names the client its X-Forwarded-For gives (the nearest
	// address that is not a trusted proxy), and its X-Forwarded-Proto or Forwarded
	// proto=https says whether the browser's connection is HTTPS (which a token sign-in
	// on plain HTTP needs). Headers from any other address are ignored. Defaults to
	// none: no proxy is trusted.
	TrustedProxies []string
	// AllowedHosts are the host names (without port) the handler answers to besides the
	// loopback names (localhost, 127.0.0.1, [::1]) and the IP address a request reached.
	// A request whose Host header names any other host gets 421 before anything else,
	// and a POST whose Origin does gets 403: a web page on a domain that re-points to
	// this machine (DNS rebinding) can then neither read the dashboard nor act through
	// it. Set the names users reach the dashboard by, such as "jobs.internal.example".
	// "*" accepts every host: use it only when a proxy in front checks the Host header.
	// Defaults to none.
	AllowedHosts []string
	// SessionIdle ends a login session (Token) after this long without a request.
	// Defaults to DefaultSessionIdle (1h).
	SessionIdle time.Duration
	// SessionMaxAge ends a login session this long after the login, however busy.
	// Defaults to DefaultSessionMaxAge (12h). Sessions live in the Handler's memory: a
	// restart signs everyone out, and instances behind one load balancer do not share
	// them (use the bearer header or basic auth there, or sticky sessions).
	SessionMaxAge time.Duration
	// Actor names who made a request, for the audit log (Audit page and log lines), such
	// as the user your ExternalAuth middleware put in the request's context. Nil or an
	// empty answer names the credential used instead ("basic auth user ops", "token
	// session 1a2b3c4d", "local (loopback)").
	Actor func(r *http.Request) string
	// CSRFKey signs the CSRF tokens of action forms. Set the same key on every instance
	// behind one load balancer so a form served by one is accepted by another. Empty means
	// a random key per Handler (forms served before a restart must then be reloaded).
	CSRFKey []byte
	// RefreshInterval is how often the queues page fetches fresh numbers. Defaults to 2s;
	// negative turns live updates off.
	RefreshInterval time.Duration
	// StatsMaxAge is how old the queue counts of the queues page and its live fragment
	// may be. They come from [skiplock.Client.CachedStats], which one request in all
	// processes recomputes per StatsMaxAge (it reads the whole jobs table: about 0.25 s
	// at a million jobs); the others read the cached row. Defaults to
	// DefaultStatsMaxAge (5s); negative reads them afresh at every request
	// ([skiplock.Client.Stats]).
	StatsMaxAge time.Duration
	// QueryTimeout bounds the database work of one request. Defaults to 10s.
	QueryTimeout time.Duration
	// Queues, when set, adds each queue's paused state and running limit to the queues
	// page; when it also implements [QueueController] and ReadOnly is false, pause and
	// resume buttons too. Nil hides those columns.
	Queues QueueSource
	// Periodic, when set, adds the periodic schedules page. Nil hides it.
	Periodic PeriodicSource
	// Logger receives errors the pages hit. Defaults to slog.Default().
	Logger *slog.Logger
}

// BasicAuth is a user and password accepted by HTTP basic authentication.
type BasicAuth struct {
	User     string // required
	Password string // required
}

// QueueInfo is what a [QueueSource] knows about a queue beyond its jobs.
type QueueInfo struct {
	// Paused says workers claim nothing from the queue; PausedAt is since when.
	Paused   bool
	PausedAt time.Time
	// Limit is the most jobs of the queue that may run at once across all workers; 0
	// means none is set.
	Limit int
}

// QueueSource supplies the queue settings that live outside the jobs tables (such as a
// queues table with paused_at and limits). The queues page calls it once per render and
// live refresh, within the request's QueryTimeout; an error is shown on the page and the
// job counts still render.
type QueueSource interface {
	// QueueInfo returns the settings of every queue it knows, by queue name.
	QueueInfo(ctx context.Context) (map[string]QueueInfo, error)
}

// QueueController pauses and resumes queues. A [Config].Queues value that implements it
// gets pause and resume buttons on the queues page.
type QueueController interface {
	// PauseQueue stops workers from claiming jobs of queue; running jobs finish.
	PauseQueue(ctx context.Context, queue string) error
	// ResumeQueue lets workers claim jobs of queue again.
	ResumeQueue(ctx context.Context, queue string) error
}

// Schedule is one periodic job as a [PeriodicSource] reports it.
type Schedule struct {
	Name    string    // the schedule's name
	Kind    string    // the kind of job it enqueues
	Queue   string    // the queue it enqueues to
	Spec    string    // when it runs, such as a cron expression
	LastRun time.Time // zero when it never ran
	NextRun time.Time // zero when unknown
	Paused  bool      // the schedule enqueues nothing: Inactive or Disabled (or the source's own reason)
	// Inactive says no running worker declares the schedule (removed from the code, or
	// its workers are all stopped); Disabled, that an operator turned it off.
	Inactive, Disabled bool
	LastJobID          int64 // the job of the last occurrence; 0 when unknown
}

// PeriodicSource lists the periodic schedules for the periodic page.
type PeriodicSource interface {
	// Schedules returns every schedule, in the order the page lists them.
	Schedules(ctx context.Context) ([]Schedule, error)
}

// PeriodicController is a [PeriodicSource] that can also run a schedule now and turn it
// off and on: the periodic page shows its buttons (unless the dashboard is read-only).
// [ClientControl] is one.
type PeriodicController interface {
	PeriodicSource
	// RunPeriodicNow makes the schedule's next occurrence due now.
	RunPeriodicNow(ctx context.Context, name string) error
	// SetPeriodicEnabled turns the schedule off (false) or on again (true).
	SetPeriodicEnabled(ctx context.Context, name string, enabled bool) error
}
