package ui

import (
	"context"
	"crypto/rand"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/ui/internal/query"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Limits on what one request may ask for.
const (
	// DefaultPageSize is how many jobs a list shows when the request names no limit.
	DefaultPageSize = 50
	// MaxPageSize is the most jobs one list page shows, whatever the request asks.
	MaxPageSize = 200
	// MaxActionIDs is the most jobs one requeue or delete action takes.
	MaxActionIDs = MaxPageSize
	// DefaultStatsMaxAge is how old the queue counts may be when Config.StatsMaxAge is 0.
	DefaultStatsMaxAge = 5 * time.Second
	// maxFilterLen bounds the queue and kind filters (a kind is at most 255 bytes).
	maxFilterLen = 255
	// maxShownPayload is how much of a job's args the job page shows.
	maxShownPayload = 256 << 10
	// maxQueuesShown bounds the rows of the queues table.
	maxQueuesShown = 500
	// maxFormBytes bounds the body of a POST.
	maxFormBytes = 64 << 10
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
	// neither is set, only requests from a loopback address without proxy headers are
	// served; others get 403. Defaults to false.
	ExternalAuth bool
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
	Paused  bool      // the schedule enqueues nothing until resumed
}

// PeriodicSource lists the periodic schedules for the periodic page.
type PeriodicSource interface {
	// Schedules returns every schedule, in the order the page lists them.
	Schedules(ctx context.Context) ([]Schedule, error)
}

// ErrInvalidConfig is returned by [New] for a configuration it cannot serve.
var ErrInvalidConfig = errors.New("ui: invalid config")

// Handler serves the dashboard. Create it with [New]; it is safe for concurrent use.
type Handler struct {
	cfg      Config
	client   *skiplock.Client
	db       *query.DB
	prefix   string
	mux      *http.ServeMux
	pages    map[string]*template.Template
	csrfKey  []byte
	sess     *sessions
	audits   *auditLog
	hosts    map[string]struct{} // AllowedHosts, normalised
	anyHost  bool                // AllowedHosts holds "*"
	crossOri *http.CrossOriginProtection
	log      *slog.Logger
}

// New returns a Handler for cfg, with its templates parsed.
func New(cfg Config) (*Handler, error) {
	if cfg.Client == nil {
		return nil, fmt.Errorf("%w: Client is nil", ErrInvalidConfig)
	}
	if cfg.Prefix != "" && (!strings.HasPrefix(cfg.Prefix, "/") || strings.HasSuffix(cfg.Prefix, "/")) {
		return nil, fmt.Errorf("%w: Prefix %q: start it with / and end it without one, such as /admin/jobs", ErrInvalidConfig, cfg.Prefix)
	}
	if cfg.BasicAuth != nil && (cfg.BasicAuth.User == "" || cfg.BasicAuth.Password == "") {
		return nil, fmt.Errorf("%w: BasicAuth needs a user and a password", ErrInvalidConfig)
	}
	if cfg.RefreshInterval == 0 {
		cfg.RefreshInterval = 2 * time.Second
	}
	if cfg.StatsMaxAge == 0 {
		cfg.StatsMaxAge = DefaultStatsMaxAge
	}
	if cfg.QueryTimeout <= 0 {
		cfg.QueryTimeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.SessionIdle <= 0 {
		cfg.SessionIdle = DefaultSessionIdle
	}
	if cfg.SessionMaxAge <= 0 {
		cfg.SessionMaxAge = DefaultSessionMaxAge
	}
	h := &Handler{
		cfg:      cfg,
		client:   cfg.Client,
		db:       query.New(cfg.Client, cfg.StatsMaxAge),
		prefix:   cfg.Prefix,
		csrfKey:  cfg.CSRFKey,
		crossOri: http.NewCrossOriginProtection(),
		log:      cfg.Logger,
		sess:     newSessions(cfg.SessionIdle, cfg.SessionMaxAge),
		audits:   &auditLog{},
		hosts:    map[string]struct{}{},
	}
	for _, name := range cfg.AllowedHosts {
		if name == anyHost {
			h.anyHost = true
			continue
		}
		n := hostName(name)
		if n == "" || n != strings.TrimSuffix(strings.ToLower(strings.TrimSpace(name)), ".") {
			return nil, fmt.Errorf("%w: AllowedHosts: %q is not a host name without a port (such as jobs.example.com)", ErrInvalidConfig, name)
		}
		h.hosts[n] = struct{}{}
	}
	if len(h.csrfKey) == 0 {
		h.csrfKey = make([]byte, 32)
		_, _ = rand.Read(h.csrfKey) // never fails
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	h.pages = pages
	h.routes()
	return h, nil
}

// routes registers every page and action. Actions are POSTs; ServeHTTP checks their CSRF
// token and the read-only mode before they run.
func (h *Handler) routes() {
	m := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	m.Handle("GET /static/", http.StripPrefix("/static/", cacheStatic(noListing(http.FileServerFS(static)))))
	m.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/svg+xml")
		w.Header().Set("Cache-Control", "public, max-age=86400")
		b, _ := staticFS.ReadFile("static/favicon.svg")
		_, _ = w.Write(b)
	})
	m.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, h.prefix+"/queues", http.StatusFound)
	})
	m.HandleFunc("GET /login", h.loginPage)
	m.HandleFunc("POST /login", h.login)
	m.HandleFunc("POST /logout", h.logout)
	m.HandleFunc("GET /queues", h.queuesPage)
	m.HandleFunc("GET /queues/live", h.queuesLive)
	m.HandleFunc("POST /queues/{queue}/pause", h.pauseQueue)
	m.HandleFunc("POST /queues/{queue}/resume", h.resumeQueue)
	m.HandleFunc("GET /jobs", h.jobsPage)
	m.HandleFunc("GET /jobs/{id}", h.jobPage)
	m.HandleFunc("POST /jobs/{id}/retry", h.retryJob)
	m.HandleFunc("POST /jobs/{id}/cancel", h.cancelJob)
	m.HandleFunc("POST /jobs/{id}/delete", h.deleteJob)
	m.HandleFunc("GET /dead", h.deadPage)
	m.HandleFunc("POST /dead", h.deadAction)
	m.HandleFunc("GET /dead/bulk", h.bulkPage)
	m.HandleFunc("POST /dead/bulk", h.bulkAction)
	m.HandleFunc("GET /workflows", h.workflowsPage)
	m.HandleFunc("GET /workflows/{id}", h.workflowPage)
	m.HandleFunc("POST /workflows/{id}/cancel", h.cancelWorkflow)
	m.HandleFunc("POST /workflows/{id}/retry", h.retryWorkflow)
	m.HandleFunc("GET /periodic", h.periodicPage)
	m.HandleFunc("GET /workers", h.workersPage)
	m.HandleFunc("GET /audit", h.auditPage)
	h.mux = m
}

// ServeHTTP serves one request: it sets the security headers, authenticates, checks the
// CSRF token and the read-only mode of actions, and routes.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			h.log.Error("skiplock ui: panic serving a request", "path", r.URL.Path, "panic", v)
			http.Error(w, "internal error", http.StatusInternalServerError)
		}
	}()
	setSecurityHeaders(w.Header())
	if !h.checkHost(w, r) {
		return
	}
	path := r.URL.Path
	if h.prefix != "" {
		rest, ok := strings.CutPrefix(path, h.prefix)
		if !ok || (rest != "" && rest[0] != '/') {
			http.NotFound(w, r)
			return
		}
		if rest == "" {
			http.Redirect(w, r, h.prefix+"/", http.StatusFound)
			return
		}
		r2 := new(http.Request)
		*r2 = *r
		u := *r.URL
		u.Path, u.RawPath = rest, ""
		// Keep the escaping of the rest (a queue name's %2F stays inside its segment).
		if raw, ok := strings.CutPrefix(r.URL.EscapedPath(), h.prefix); ok && raw != rest {
			u.RawPath = raw
		}
		r2.URL = &u
		r = r2
	}
	if !strings.HasPrefix(r.URL.Path, "/static/") && r.URL.Path != "/login" && r.URL.Path != "/favicon.ico" {
		if !h.authorize(w, r) {
			return
		}
	}
	if r.Method == http.MethodPost {
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		if err := h.crossOri.Check(r); err != nil || !h.originAllowed(r) {
			h.refuse(w, r, http.StatusForbidden, "Refused: a cross-origin request cannot act on jobs.")
			return
		}
		if !h.checkCSRF(r) {
			h.refuse(w, r, http.StatusForbidden, "Refused: the form's CSRF token is missing or out of date. Reload the page and try again.")
			return
		}
		if h.cfg.ReadOnly && r.URL.Path != "/login" && r.URL.Path != "/logout" {
			h.refuse(w, r, http.StatusForbidden, "Refused: this dashboard is read-only.")
			return
		}
	}
	if r.Method == http.MethodPost {
		h.serveAudited(w, r)
		return
	}
	h.mux.ServeHTTP(w, r)
}

// setSecurityHeaders allows only the handler's own script, stylesheet and images, and
// forbids framing and content sniffing.
func setSecurityHeaders(hd http.Header) {
	hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "same-origin")
}

// noListing answers 404 for a directory of the embedded files instead of listing it.
func noListing(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "" || strings.HasSuffix(r.URL.Path, "/") {
			http.NotFound(w, r)
			return
		}
		if f, err := fs.Stat(staticFS, "static/"+r.URL.Path); err != nil || f.IsDir() {
			http.NotFound(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func cacheStatic(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=300")
		next.ServeHTTP(w, r)
	})
}

// queryCtx bounds the database work of one request.
func (h *Handler) queryCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), h.cfg.QueryTimeout)
}
