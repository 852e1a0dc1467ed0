package ui_test

import (
	"log"
	"net/http"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/ui"
)

// The dashboard mounted inside a service, under its own path, behind the service's own
// authentication middleware.
func ExampleNew() {
	var client *skiplock.Client // the service's client, from skiplock.NewClient
	requireAdmin := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// ... check the session, or answer 401/403 and return ...
			next.ServeHTTP(w, r)
		})
	}

	h, err := ui.New(ui.Config{
		Client:       client,
		Prefix:       "/admin/jobs",
		ExternalAuth: true,                          // requireAdmin authenticates every request
		AllowedHosts: []string{"admin.example.com"}, // the host users reach it by
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/admin/jobs/", requireAdmin(h))
	_ = http.ListenAndServe("127.0.0.1:8080", mux)
}
