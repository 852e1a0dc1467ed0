package ui

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/skiplock/skiplock/ui/internal/query"
)

// ErrInvalidConfig is returned by [New] for a configuration it cannot serve.
var ErrInvalidConfig = errors.New("ui: invalid config")

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
	proxies, err := parseProxies(cfg.TrustedProxies)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	db := query.New(cfg.Client, cfg.StatsMaxAge)
	h := &Handler{
		cfg:      cfg,
		client:   cfg.Client,
		db:       db,
		prefix:   cfg.Prefix,
		csrfKey:  cfg.CSRFKey,
		crossOri: http.NewCrossOriginProtection(),
		log:      cfg.Logger,
		sess:     newSessions(cfg.SessionIdle, cfg.SessionMaxAge),
		audit:    &auditLog{db: db.Audit, log: cfg.Logger, keepActions: maxAuditActions, keepRefs: maxAuditRefused},
		hosts:    map[string]struct{}{},
		proxies:  proxies,
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
	m.HandleFunc("GET /queue", h.queuePage)          // the queue is ?name=: any name, "/" and "live" too
	m.HandleFunc("POST /queues/pause", h.pauseQueue) // the queue is the form's "queue" field
	m.HandleFunc("POST /queues/resume", h.resumeQueue)
	m.HandleFunc("POST /queues/{queue}/pause", h.pauseQueue) // the forms of earlier versions' pages
	m.HandleFunc("POST /queues/{queue}/resume", h.resumeQueue)
	m.HandleFunc("GET /jobs", h.jobsPage)
	m.HandleFunc("GET /search", h.searchPage)
	m.HandleFunc("GET /jobs/{id}", h.jobPage)
	m.HandleFunc("POST /jobs/{id}/retry", h.retryJob)
	m.HandleFunc("POST /jobs/{id}/cancel", h.cancelJob)
	m.HandleFunc("POST /jobs/{id}/delete", h.deleteJob)
	m.HandleFunc("POST /jobs/{id}/edit", h.editJob)
	m.HandleFunc("POST /jobs/{id}/retry-args", h.retryWithArgs)
	m.HandleFunc("GET /dead", h.deadPage)
	m.HandleFunc("POST /dead", h.deadAction)
	m.HandleFunc("GET /dead/bulk", h.deadBulkPage)
	m.HandleFunc("POST /dead/bulk", h.deadBulkAction)
	m.HandleFunc("GET /jobs/bulk", h.jobsBulkPage)
	m.HandleFunc("POST /jobs/bulk", h.jobsBulkAction)
	m.HandleFunc("POST /jobs/selected", h.jobsSelected)
	m.HandleFunc("GET /workflows", h.workflowsPage)
	m.HandleFunc("GET /workflows/{id}", h.workflowPage)
	m.HandleFunc("POST /workflows/{id}/cancel", h.cancelWorkflow)
	m.HandleFunc("POST /workflows/{id}/retry", h.retryWorkflow)
	m.HandleFunc("GET /periodic", h.periodicPage)
	m.HandleFunc("POST /periodic/run", h.runPeriodic) // the schedule is the form's "name"
	m.HandleFunc("POST /periodic/enable", h.enablePeriodic)
	m.HandleFunc("POST /periodic/disable", h.disablePeriodic)
	m.HandleFunc("GET /workers", h.workersPage)
	m.HandleFunc("GET /limits", h.limitsPage)
	m.HandleFunc("POST /limits", h.setLimits)
	m.HandleFunc("POST /limits/reset", h.resetLimits)
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
	if r.Method != http.MethodPost && crossSiteSubresource(r) {
		// No page, no cookie, no query: the other site's page learns nothing and costs
		// the database nothing.
		http.Error(w, "403 forbidden: another site's page cannot load the dashboard; follow a link to it instead",
			http.StatusForbidden)
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
		if h.postAllowed(w, r) {
			h.serveAudited(w, r)
		}
		return
	}
	h.mux.ServeHTTP(w, r)
}

// postAllowed reads the form of the POST r and checks it may act: its size (413), its
// origin and CSRF token (403, recorded as refused forgeries), the read-only mode (403).
// It answers and reports false when not.
func (h *Handler) postAllowed(w http.ResponseWriter, r *http.Request) bool {
	if !h.readForm(w, r) {
		return false
	}
	if err := h.crossOri.Check(r); err != nil || !h.originAllowed(r) {
		h.refuseForgery(w, r, "cross-origin request", "Refused: a cross-origin request cannot act on jobs.")
		return false
	}
	if !h.checkCSRF(r) {
		msg := "Refused: the form's CSRF token is missing or out of date. Reload the page and try again."
		if _, err := r.Cookie(csrfCookie); err != nil && r.TLS == nil && !h.local(r) && !h.forwardedHTTPS(r) {
			msg = "Refused: the browser sent no CSRF cookie. Over plain HTTP it keeps no Secure cookie, and " +
				"cookies are Secure unless the request is local: use HTTPS, or set TrustLoopback " +
				"(skiplock ui --trust-loopback) for a browser on this machine."
		}
		h.refuseForgery(w, r, "CSRF token missing or out of date", msg)
		return false
	}
	if h.cfg.ReadOnly && r.URL.Path != "/login" && r.URL.Path != "/logout" {
		h.refuse(w, r, http.StatusForbidden, "Refused: this dashboard is read-only.")
		return false
	}
	return true
}

// readForm reads the form of the POST r, at most maxFormBytes, and answers when it cannot:
// 413 for a larger body (before the CSRF check, which would otherwise find no token in
// the cut form and call it a forgery), 400 for one that does not parse.
func (h *Handler) readForm(w http.ResponseWriter, r *http.Request) bool {
	tooBig := r.ContentLength > maxFormBytes
	if !tooBig {
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		err := r.ParseForm()
		var mbe *http.MaxBytesError
		tooBig = errors.As(err, &mbe)
		if err != nil && !tooBig {
			h.refuse(w, r, http.StatusBadRequest, "The form could not be read.")
			return false
		}
	}
	if tooBig {
		w.Header().Set("Connection", "close") // the rest of the body is not read
		h.refuse(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("Refused: a form is at most %d KiB.", maxFormBytes>>10))
		return false
	}
	return true
}

// crossSiteSubresource reports whether r is a request another site's page made the
// browser send (Sec-Fetch-Site cross-site or same-site, such as another port of
// localhost) other than a top-level navigation: an image, a script, a fetch, a frame. A
// page cannot read the answer, but the dashboard would run its queries for it (with
// TrustLoopback or remembered basic auth, the browser's request is authorized), so such
// requests are refused. A followed link (Sec-Fetch-Mode navigate, Sec-Fetch-Dest
// document) and clients that send no fetch metadata are served.
func crossSiteSubresource(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
		return false
	}
	return r.Header.Get("Sec-Fetch-Mode") != "navigate" || r.Header.Get("Sec-Fetch-Dest") != "document"
}

// setSecurityHeaders allows only the handler's own script, stylesheet and images,
// forbids framing, content sniffing and loading by other origins (CORP), and keeps every
// answer out of caches unless it says otherwise (only the embedded static files do): a
// refusal written by net/http (421, a path no route has, a recovered panic) is no-store
// as every page is.
func setSecurityHeaders(hd http.Header) {
	hd.Set("Cache-Control", "no-store")
	hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "same-origin")
	hd.Set("Cross-Origin-Resource-Policy", "same-origin")
}
