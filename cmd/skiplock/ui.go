package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/skiplock/skiplock/ui"
)

const (
	// defaultListen keeps the dashboard on this machine unless asked otherwise.
	defaultListen = "127.0.0.1:8080"
	// uiShutdownGrace is how long in-flight requests get once the server is interrupted.
	uiShutdownGrace = 5 * time.Second
)

// uiCommand is `skiplock ui`: the dashboard of the ui package on an HTTP server.
func uiCommand() *command {
	return &command{
		name:    "ui",
		args:    "[--listen ADDR] [--allowed-host NAMES] [--read-only] [--token T | --basic-auth USER:PASS | --trust-loopback] [--trusted-proxy ADDRS]",
		summary: "serve the operator dashboard (default http://" + defaultListen + "/)",
		help: "Serves the dashboard: queues with live counts and a throughput plot, jobs, dead and\n" +
			"failed jobs, and the actions retry, cancel, delete and requeue. It runs until\n" +
			"interrupted; --timeout bounds each request's database work instead of the command.\n" +
			"It needs --token or --basic-auth, or --trust-loopback to let users of this machine in\n" +
			"without one (only when no proxy on this machine forwards to it: nginx's plain\n" +
			"proxy_pass would bring every visitor in as local). It listens on loopback by default\n" +
			"and refuses any other address unless --token or --basic-auth is set. The token and\n" +
			"the credentials may come from $SKIPLOCK_UI_TOKEN and $SKIPLOCK_UI_BASIC_AUTH instead,\n" +
			"which keeps them out of the process list. Behind a reverse proxy, name it with\n" +
			"--trusted-proxy: its X-Forwarded-For and X-Forwarded-Proto are believed, no one else's.\n" +
			"It answers only to the loopback names (localhost, 127.0.0.1, [::1]), the IP address\n" +
			"a request reached, and the names given by --allowed-host: a request for any other\n" +
			"Host gets 421, so a web page on a domain re-pointed to this machine cannot use it.",
		serve: true,
		flags: func(fs *flag.FlagSet, o *options) {
			fs.StringVar(&o.ui.listen, "listen", defaultListen, "listen on `ADDR`, host:port")
			fs.StringVar(&o.ui.hosts, "allowed-host", "", "also answer to these host `NAMES` (comma-separated, no ports), such as jobs.example.com")
			fs.BoolVar(&o.ui.readOnly, "read-only", false, "refuse every action and hide its buttons")
			fs.StringVar(&o.ui.token, "token", "", "require this `token` (bearer header or the /login page); defaults to $SKIPLOCK_UI_TOKEN")
			fs.StringVar(&o.ui.basicAuth, "basic-auth", "", "require HTTP basic auth as `user:password`; defaults to $SKIPLOCK_UI_BASIC_AUTH")
			fs.BoolVar(&o.ui.trustLoopback, "trust-loopback", false, "take loopback connections without a proxy header for users of this machine, served without auth when no token or basic auth is set (not when a proxy on this machine forwards to the dashboard)")
			fs.StringVar(&o.ui.proxies, "trusted-proxy", "", "believe X-Forwarded-For and X-Forwarded-Proto from the proxies at `ADDRS` (comma-separated IPs or CIDR prefixes), from no one else")
		},
		run: cmdUI,
	}
}

// cmdUI checks the listen address against the auth options, connects, and serves until
// ctx ends.
func cmdUI(ctx context.Context, a *app, o *options) error {
	opt, cfg, err := a.uiSettings(o.ui)
	if err != nil {
		return err
	}

	client, pool, err := a.connect(ctx, "ui")
	if err != nil {
		return err
	}
	defer pool.Close()
	ctl := ui.NewClientControl(client)
	cfg.Client = client
	cfg.Queues = ctl   // paused state, pause and resume buttons
	cfg.Periodic = ctl // the periodic page
	cfg.QueryTimeout = a.timeout
	cfg.Logger = slog.New(slog.NewTextHandler(a.stderr, nil))
	h, err := ui.New(cfg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", opt.listen)
	if err != nil {
		return fmt.Errorf("ui: cannot listen on %s: %w", opt.listen, err)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      a.timeout + 10*time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	mode := ""
	if opt.readOnly {
		mode = ", read-only"
	}
	fmt.Fprintf(a.stdout, "skiplock ui: schema %q at http://%s/ (%s%s); Ctrl-C stops it\n",
		a.schema, ln.Addr(), authMode(cfg), mode)

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("ui: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), uiShutdownGrace)
	defer cancel()
	err = srv.Shutdown(sctx)
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// uiSettings completes the ui flags from the environment and checks them: the token and
// basic auth from $SKIPLOCK_UI_TOKEN and $SKIPLOCK_UI_BASIC_AUTH when the flags leave them
// out, that some way in is set, the listen address against the auth, and --allowed-host
// and --trusted-proxy split into lists. It returns the handler's settings from them.
func (a *app) uiSettings(opt uiOptions) (uiOptions, ui.Config, error) {
	cfg := ui.Config{ReadOnly: opt.readOnly, TrustLoopback: opt.trustLoopback,
		AllowedHosts: splitList(opt.hosts), TrustedProxies: splitList(opt.proxies)}
	if opt.token == "" {
		opt.token = a.getenv("SKIPLOCK_UI_TOKEN")
	}
	cfg.Token = opt.token
	if opt.basicAuth == "" {
		opt.basicAuth = a.getenv("SKIPLOCK_UI_BASIC_AUTH")
	}
	if opt.basicAuth != "" {
		user, pass, ok := strings.Cut(opt.basicAuth, ":")
		if !ok || user == "" || pass == "" {
			return opt, cfg, usagef("ui", "ui: --basic-auth must be user:password, both non-empty")
		}
		cfg.BasicAuth = &ui.BasicAuth{User: user, Password: pass}
	}
	if _, _, err := net.SplitHostPort(opt.listen); err != nil {
		return opt, cfg, usagef("ui", "ui: --listen %q is not host:port (for example %s)", opt.listen, defaultListen)
	}
	noAuth := opt.token == "" && cfg.BasicAuth == nil
	if noAuth && !ui.IsLoopbackListen(opt.listen) {
		return opt, cfg, usagef("ui", "ui: --listen %s is reachable from other machines: set --token or --basic-auth "+
			"(or $SKIPLOCK_UI_TOKEN / $SKIPLOCK_UI_BASIC_AUTH) so that only you can act on the jobs, or listen on %s",
			opt.listen, defaultListen)
	}
	if noAuth && !opt.trustLoopback {
		return opt, cfg, usagef("ui", "ui: no authentication: set --token or --basic-auth (or $SKIPLOCK_UI_TOKEN / "+
			"$SKIPLOCK_UI_BASIC_AUTH), or --trust-loopback to let the users of this machine in without one "+
			"(only when no proxy on this machine forwards to the dashboard)")
	}
	return opt, cfg, nil
}

// splitList splits a comma-separated flag into its non-empty items.
func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

func authMode(cfg ui.Config) string {
	switch {
	case cfg.Token != "" && cfg.BasicAuth != nil:
		return "token or basic auth"
	case cfg.Token != "":
		return "token required"
	case cfg.BasicAuth != nil:
		return "basic auth required"
	}
	return "no auth: users of this machine (loopback) only"
}
