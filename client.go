// This file holds the Client: what it wraps (the pool, the schema, the engine's parts)
// and NewClient, which builds it without I/O.

package skiplock

import (
	"errors"
	"log/slog"
	"runtime/debug"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/skiplock/skiplock/internal/enqueue"
	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/notify"
	"github.com/skiplock/skiplock/internal/pgutil"
	"github.com/skiplock/skiplock/internal/settle"
)

// DBTX is what enqueueing inside the caller's transaction needs; pgx.Tx satisfies it.
// skiplock never begins, commits or rolls back a DBTX it is given.
type DBTX = jobtype.DBTX

// Client enqueues and inspects jobs. It wraps a pool the caller owns and is safe for
// concurrent use. Create one with [NewClient].
type Client struct {
	db       pgutil.DB // the pool, the schema and the wake-up channel, as the engine takes them
	pool     *pgxpool.Pool
	schema   string
	maxBytes int
	keyring  *Keyring // encrypt.go; nil: none
	logger   *slog.Logger
	notify   *notify.Notifier  // wake-ups: the channel, the throttle of Enqueue's notifications
	flows    *settle.Settler   // settles workflow tasks' dependents (internal/settle)
	enq      *enqueue.Inserter // writes jobs, workflows and sequences; coalesces Enqueue's calls

	hooks []Hook // Config.Hooks
	// waitPoll is how often Wait and WaitWorkflow read again without a notification;
	// zero: every second.
	waitPoll time.Duration
	// waitRefresh is how often they refresh their job_waiters rows; zero:
	// waiting.RefreshEvery.
	waitRefresh time.Duration
}

// NewClient returns a Client on pool. The pool is not closed by skiplock. A field out of
// range is an error that matches [ErrInvalidConfig] and names the field. NewClient does
// no I/O: call [Client.CheckSchema] to learn at start-up that the schema is not migrated.
func NewClient(pool *pgxpool.Pool, cfg Config) (*Client, error) {
	if pool == nil {
		return nil, errors.New("skiplock: NewClient: pool is nil")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Schema == "" {
		cfg.Schema = DefaultSchema
	}
	if cfg.MaxPayloadBytes == 0 {
		cfg.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	if cfg.NotifyInterval == 0 {
		cfg.NotifyInterval = DefaultNotifyInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.CoalesceWindow == 0 {
		cfg.CoalesceWindow = DefaultCoalesceWindow
	}
	c := &Client{
		db:       pgutil.DB{Pool: pool, Schema: cfg.Schema, Channel: notify.JobsChannel(cfg.Schema)},
		pool:     pool,
		schema:   cfg.Schema,
		maxBytes: cfg.MaxPayloadBytes,
		logger:   cfg.Logger,
		notify:   notify.New(pool, cfg.Schema, cfg.NotifyInterval, cfg.Logger),
		flows:    settle.New(cfg.Schema),
		hooks:    slices.Clone(cfg.Hooks),
		keyring:  cfg.Keyring,
	}
	var enqueueHooks []EnqueueHook // those of the hooks that implement EnqueueHook
	for _, h := range cfg.Hooks {
		if eh, ok := h.(EnqueueHook); ok {
			enqueueHooks = append(enqueueHooks, eh)
		}
	}
	c.enq = enqueue.New(enqueue.Config{Pool: pool, Schema: cfg.Schema, Notifier: c.notify, Mapper: c.flows.Mapper,
		Hooks: enqueueHooks, CoalesceWindow: cfg.CoalesceWindow, InsertMiddleware: cfg.InsertMiddleware,
		MaxPayloadBytes: cfg.MaxPayloadBytes})
	return c, nil
}

// Pool returns the pool the client was built on, for callers (the dashboard, tests) that
// read skiplock's tables with their own queries.
func (c *Client) Pool() *pgxpool.Pool { return c.pool }

// Schema returns the schema the client works in.
func (c *Client) Schema() string { return c.schema }

// wrapErr adds the operation and turns an undefined table into ErrNotMigrated.
func (c *Client) wrapErr(op string, err error) error { return c.db.WrapErr(op, err) }

// modulePath is this module's path, as go.mod declares it and the build info names it.
const modulePath = "github.com/skiplock/skiplock"

// develVersion is the version reported when the build names none: a build from a checkout
// without version control information, go run, go test, or a binary without build info.
const develVersion = "(devel)"

// moduleVersion returns the version of the skiplock module this program was built with,
// read from the build info the go command embeds in every binary: "v0.1.0" for a release,
// a pseudo-version for a commit between releases, or "(devel)" when the build names none.
// It works whether skiplock is the program's main module (a binary built in this
// repository) or one of its dependencies (a service that imports skiplock).
func moduleVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return develVersion
	}
	return versionFromBuildInfo(bi)
}

// versionFromBuildInfo is moduleVersion for the build described by bi.
func versionFromBuildInfo(bi *debug.BuildInfo) string {
	if bi.Main.Path == modulePath {
		return orDevel(bi.Main.Version)
	}
	for _, d := range bi.Deps {
		if d.Path != modulePath {
			continue
		}
		if d.Replace != nil {
			// A replacement by a directory has no version of its own (the required one is
			// then often the placeholder v0.0.0-00010101000000-000000000000); a replacement
			// by another module version is the code that was built.
			return orDevel(d.Replace.Version)
		}
		return orDevel(d.Version)
	}
	return develVersion
}

func orDevel(v string) string {
	if v == "" {
		return develVersion
	}
	return v
}
