package ui

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/ui/internal/query"
)

// pageNames are the templates/<name>.html files; each defines "content" for the layout.
var pageNames = []string{"queues", "jobs", "job", "dead", "periodic", "workers", "login", "message", "bulk", "audit", "workflows", "workflow"}

func parsePages() (map[string]*template.Template, error) {
	pages := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New("layout").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/partials.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("ui: parse template %s: %w", name, err)
		}
		pages[name] = t
	}
	return pages, nil
}

// pageData is what every template gets: the layout's fields and the page's own Data.
type pageData struct {
	Title       string
	Active      string // the nav entry to highlight
	Prefix      string // put in front of every link
	CSRF        string // the token action forms carry
	ReadOnly    bool
	HasPeriodic bool
	SignedIn    bool // auth is configured
	Session     bool // the request came with a login session: show the sign-out button
	Flash       string
	Data        any
}

// render executes page into a buffer first, so a template error becomes a clean 500
// instead of half a page.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, page, title, active string, data any) {
	h.renderTemplate(w, r, page, "layout", title, active, data)
}

func (h *Handler) renderTemplate(w http.ResponseWriter, r *http.Request, page, tmpl, title, active string, data any) {
	pd := pageData{
		Title: title, Active: active, Prefix: h.prefix, CSRF: h.csrfToken(w, r),
		ReadOnly: h.cfg.ReadOnly, HasPeriodic: h.cfg.Periodic != nil, SignedIn: h.cfg.Token != "" || h.cfg.BasicAuth != nil,
		Session: h.sessionOK(r),
		Flash:   flashMessage(r), Data: data,
	}
	var buf bytes.Buffer
	if err := h.pages[page].ExecuteTemplate(&buf, tmpl, pd); err != nil {
		h.log.Error("skiplock ui: render", "page", page, "err", err)
		http.Error(w, "internal error: the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = buf.WriteTo(w)
}

// refuse answers with status and a message page.
func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, status int, msg string) {
	w.WriteHeader(status)
	h.render(w, r, "message", http.StatusText(status), "", map[string]any{"Status": status, "Message": msg})
}

// fail answers a database error: what happened and what to do, without internals.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, skiplock.ErrNotMigrated) || errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000"):
		h.refuse(w, r, http.StatusInternalServerError, fmt.Sprintf(
			"Schema %q is not migrated: run 'skiplock --schema %s migrate up' (or skiplock.Migrate) first.", h.client.Schema(), h.client.Schema()))
	case errors.Is(err, context.DeadlineExceeded):
		h.refuse(w, r, http.StatusServiceUnavailable, fmt.Sprintf(
			"The database did not answer within %s. Try again, or look for a long lock on the jobs tables.", h.cfg.QueryTimeout))
	case errors.Is(err, context.Canceled):
		// The client went away; nobody reads the answer.
	default:
		h.log.Error("skiplock ui: database error", "path", r.URL.Path, "err", err)
		h.refuse(w, r, http.StatusInternalServerError, "The database returned an error: "+err.Error())
	}
}

// Flash messages are chosen by a code in the redirect's query, never taken as text from
// it, so a link cannot make the page say something the handler did not.
var flashes = map[string]string{
	"requeued":  "Requeued %s.",
	"runnow":    "The job is due now; a worker will pick it up at its next poll.",
	"cancelled": "Cancelled the job.",
	"deleted":   "Deleted %s.",
	"running":   "Not deleted: the job is running. Cancel it first, then delete it.",
	"skipped":   "%s changed state meanwhile and were left alone.",
	"paused":    "Paused the queue.",
	"resumed":   "Resumed the queue.",
	"unchanged": "Nothing to do: the job is not in a state this action applies to.",
	// The workflow actions count tasks (flashText says "task" for a wf code).
	"wfcancelled": "Cancelled %s: the workflow's tasks that had not started.",
	"wfretried":   "Put %s back: the workflow's failed, dead and cancelled tasks.",
	"wfunchanged": "Nothing to do: no task of the workflow is in a state this action applies to.",
	"budget":      "The action stopped at its time limit before reaching every job: run it again for the rest.",
}

func flashMessage(r *http.Request) string { return flashText(r.URL.Query()) }

// flashText is the message of the done codes of q.
func flashText(q url.Values) string {
	var parts []string
	for _, code := range strings.Split(q.Get("done"), ",") {
		f, ok := flashes[code]
		if !ok {
			continue
		}
		if strings.Contains(f, "%s") {
			n, _ := strconv.Atoi(q.Get("n_" + code))
			what := "job"
			if strings.HasPrefix(code, "wf") {
				what = "task"
			}
			f = fmt.Sprintf(f, plural(n, what))
		}
		parts = append(parts, f)
	}
	return strings.Join(parts, " ")
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

var funcs = template.FuncMap{
	"ago":      ago,
	"until":    until,
	"stamp":    stamp,
	"duration": shortDuration,
	"num":      thousands,
	// pathEscape escapes a name for one path segment: a queue called "../jobs/1/delete?"
	// stays one segment of the URL it goes in.
	"pathEscape": url.PathEscape,
	"isZero":     func(t time.Time) bool { return t.IsZero() },
	"scanWindow": func() int64 { return query.ScanWindow },
	// sortLink hands a sortable column header its page, key and label.
	"sortLink": func(p pageData, key, label string) sortLink {
		v, _ := p.Data.(*queuesView)
		return sortLink{Page: p, Key: key, Label: label, On: v != nil && v.Sort == key}
	},
	// rows hands the shared job table its rows, the page (for links and the token) and
	// whether to show selection boxes.
	"rows": func(p pageData, rows []query.Row, sel bool) tableData { return tableData{p, rows, sel} },
}

type sortLink struct {
	Page       pageData
	Key, Label string
	On         bool
}

type tableData struct {
	Page   pageData
	Rows   []query.Row
	Select bool
}

// stamp formats a time in UTC to the second.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05") + " UTC"
}

// ago says how long ago t was, such as "3m ago"; a future t says "in 3m".
func ago(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := time.Since(t)
	if d < 0 {
		return "in " + shortDuration(-d)
	}
	return shortDuration(d) + " ago"
}

func until(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return ago(t)
}

// shortDuration rounds d for people: 45s, 12m, 3h 5m, 2d 4h.
func shortDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "—"
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm %ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh %dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		return fmt.Sprintf("%dd %dh", int(d.Hours())/24, int(d.Hours())%24)
	}
}

// thousands writes n with thin separators: 12 345.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteString("\u202f")
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
