package ui

// This file holds the page templates: their parsing, the data every page gets and the
// functions they call.

import (
	"embed"
	"fmt"
	"html/template"
	"time"

	"github.com/skiplock/skiplock/ui/internal/query"
)

//go:embed templates/*.html
var templateFS embed.FS

// pageNames are the templates/<name>.html files; each defines "content" for the layout.
var pageNames = []string{"queues", "jobs", "job", "dead", "periodic", "workers", "limits", "login", "message", "bulk", "audit", "workflows", "workflow", "queue", "search"}

func parsePages() (map[string]*template.Template, error) {
	pages := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New("layout").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/partials.html", "templates/jobsteps.html", jobLogsTemplate, "templates/"+name+".html")
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
	// Refresh, when positive, reloads the page every that many seconds (the workers
	// page's running jobs): a page's data sets it by implementing refresher.
	Refresh int
}

// refresher is a page's data that asks the page to reload itself every RefreshSeconds.
type refresher interface{ RefreshSeconds() int }

var funcs = template.FuncMap{
	"ago":          ago,
	"until":        until,
	"stamp":        stamp,
	"duration":     shortDuration,
	"num":          thousands,
	"isZero":       func(t time.Time) bool { return t.IsZero() },
	"since":        func(t time.Time) time.Duration { return time.Since(t) },
	"scanWindow":   func() int64 { return query.ScanWindow },
	"searchWindow": func() string { return thousands(query.SearchWindow) },
	// sortLink hands a sortable column header its page, key and label.
	"sortLink": func(p pageData, key, label string) sortLink {
		v, ok := p.Data.(sortedView)
		return sortLink{Page: p, Key: key, Label: label, On: ok && v.sortedBy() == key}
	},
	// rows hands the shared job table its rows, the page (for links and the token) and
	// whether to show selection boxes.
	"rows": func(p pageData, rows []query.Row, sel bool) tableData { return tableData{p, rows, sel} },
}

// sortedView is the data of a page whose table sorts by a column (the queues page).
type sortedView interface {
	sortedBy() string // the key of the column the table is sorted by; "" for the default
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
