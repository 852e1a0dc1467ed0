package ui

import (
	"context"
	"html/template"
	"log/slog"
	"net/http"
	"net/netip"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/ui/internal/query"
)

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
	audit    *auditLog
	hosts    map[string]struct{} // AllowedHosts, normalised
	anyHost  bool                // AllowedHosts holds "*"
	proxies  []netip.Prefix      // TrustedProxies, parsed
	crossOri *http.CrossOriginProtection
	log      *slog.Logger
}

// queryCtx bounds the database work of one request.
func (h *Handler) queryCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), h.cfg.QueryTimeout)
}
