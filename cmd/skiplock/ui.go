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
		args:    "[--listen ADDR] [--allowed-host NAMES] [--read-only] [--token T | --basic-auth USER:PASS]",
		summary: "serve the operator dashboard (default http://" + defaultListen + "/)",
		help: "Serves the dashboard: queues with live counts and a throughput plot, jobs, dead and\n" +
			"failed jobs, and the actions retry, cancel, delete and requeue. It runs until\n" +
			"interrupted; --timeout bounds each request's database work instead of the command.\n" +
			"It listens on loopback by default and refuses any other address unless --token or\n" +
			"--basic-auth is set. The token and the credentials may come from $SKIPLOCK_UI_TOKEN\n" +
			"and $SKIPLOCK_UI_BASIC_AUTH instead, which keeps them out of the process list.\n" +
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
		},
		run: cmdUI,
	}
}

// cmdUI checks the listen address against the auth options, connects, and serves until
// ctx ends.
func cmdUI(ctx context.Context, a *app, o *options) error {
	opt, basic, hosts, err := a.uiSettings(o.ui)
	if err != nil {
		return err
	}

	client, pool, err := a.connect(ctx, "ui")
	if err != nil {
		return err
	}
	defer pool.Close()
	ctl := ui.NewClientControl(client)
	h, err := ui.New(ui.Config{
		Client:       client,
		Queues:       ctl, // paused state, pause and resume buttons
		Periodic:     ctl, // the periodic page
		ReadOnly:     opt.readOnly,
		Token:        opt.token,
		BasicAuth:    basic,
		AllowedHosts: hosts,
		QueryTimeout: a.timeout,
		Logger:       slog.New(slog.NewTextHandler(a.stderr, nil)),
	})
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
		a.schema, ln.Addr(), authMode(opt.token, basic), mode)

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
// out, the listen address against the auth, and --allowed-host split into names.
func (a *app) uiSettings(opt uiOptions) (uiOptions, *ui.BasicAuth, []string, error) {
	if opt.token == "" {
		opt.token = a.getenv("SKIPLOCK_UI_TOKEN")
	}
	if opt.basicAuth == "" {
		opt.basicAuth = a.getenv("SKIPLOCK_UI_BASIC_AUTH")
	}
	var basic *ui.BasicAuth
	if opt.basicAuth != "" {
		user, pass, ok := strings.Cut(opt.basicAuth, ":")
		if !ok || user == "" || pass == "" {
			return opt, nil, nil, usagef("ui", "ui: --basic-auth must be user:password, both non-empty")
		}
		basic = &ui.BasicAuth{User: user, Password: pass}
	}
	if _, _, err := net.SplitHostPort(opt.listen); err != nil {
		return opt, nil, nil, usagef("ui", "ui: --listen %q is not host:port (for example %s)", opt.listen, defaultListen)
	}
	if !ui.IsLoopbackListen(opt.listen) && opt.token == "" && basic == nil {
		return opt, nil, nil, usagef("ui", "ui: --listen %s is reachable from other machines: set --token or --basic-auth "+
			"(or $SKIPLOCK_UI_TOKEN / $SKIPLOCK_UI_BASIC_AUTH) so that only you can act on the jobs, or listen on %s",
			opt.listen, defaultListen)
	}

	var hosts []string
	for _, name := range strings.Split(opt.hosts, ",") {
		if name = strings.TrimSpace(name); name != "" {
			hosts = append(hosts, name)
		}
	}
	return opt, basic, hosts, nil
}

func authMode(token string, basic *ui.BasicAuth) string {
	switch {
	case token != "" && basic != nil:
		return "token or basic auth"
	case token != "":
		return "token required"
	case basic != nil:
		return "basic auth required"
	}
	return "no auth: loopback only"
}
