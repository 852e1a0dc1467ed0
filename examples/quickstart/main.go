// Command quickstart shows skiplock end to end: an order and its confirmation email
// written in one transaction, a rolled-back order that leaves no job, a flaky job that
// fails and then succeeds on retry, and a burst of jobs drained by a worker, with live
// progress and a final table of jobs by status.
//
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres go run ./examples/quickstart
//
// It works in a schema of its own per run (skiplock_demo_ and 8 random hex digits),
// dropped when it ends, so demos running at once on one database never meet. With
// SKIPLOCK_DEMO_SCHEMA set it uses that schema instead, resets it first and keeps it
// afterwards (make ui does so, to show the demo's jobs in the dashboard).
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"regexp"
	"sort"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock"
)

// schema is this run's schema (see the package comment).
var schema string

// SendConfirmation is the job: email the customer that their order is confirmed.
type SendConfirmation struct {
	OrderID int64  `json:"order_id"`
	Email   string `json:"email"`
}

// Kind implements skiplock.JobArgs.
func (SendConfirmation) Kind() string { return "send_confirmation" }

// SyncInventory talks to a flaky downstream service: it fails twice, then succeeds.
type SyncInventory struct {
	SKU string `json:"sku"`
}

// Kind implements skiplock.JobArgs.
func (SyncInventory) Kind() string { return "sync_inventory" }

// Thumbnail is a small unit of work, enqueued in bulk.
type Thumbnail struct {
	ImageID int `json:"image_id"`
}

// Kind implements skiplock.JobArgs.
func (Thumbnail) Kind() string { return "thumbnail" }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

// run is the demo, one numbered step after another: each step's work is a function below.
func run(ctx context.Context) error {
	pool, err := connect(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	dropSchema, err := chooseSchema(ctx, pool)
	if err != nil {
		return err
	}
	defer dropSchema()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))

	step("1. migrate", "schema %s (this run's own; dropped at the end unless SKIPLOCK_DEMO_SCHEMA named it)", schema)
	client, err := migrate(ctx, pool, logger)
	if err != nil {
		return err
	}

	step("2. order + email job, one transaction, committed", "")
	orderID, err := placeOrder(ctx, pool, client, "ada@example.com", true)
	if err != nil {
		return err
	}
	fmt.Printf("   order %d committed together with its confirmation job\n", orderID)

	step("3. order + email job, rolled back", "")
	if err := rollBackOrder(ctx, pool, client); err != nil {
		return err
	}

	step("4. a flaky job and a burst of 10,000 jobs", "")
	if err := enqueueFlakyAndBurst(ctx, client); err != nil {
		return err
	}

	step("5. run a worker", "until every job is finished")
	w, err := newWorker(pool, client, logger)
	if err != nil {
		return err
	}
	if err := runUntilDone(ctx, pool, w); err != nil {
		return err
	}

	step("6. jobs by status", "")
	return printTable(ctx, pool)
}

// connect opens a pool on $DATABASE_URL (a local Postgres when it is unset) and checks
// that the database answers.
func connect(ctx context.Context) (*pgxpool.Pool, error) {
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("cannot reach Postgres at %s: %w (run `make db`, or set DATABASE_URL)", redact(url), err)
	}
	return pool, nil
}

// chooseSchema sets schema for this run: SKIPLOCK_DEMO_SCHEMA when set, else a new random
// name. It returns what to do at the end: drop the random schema, keep a named one.
func chooseSchema(ctx context.Context, pool *pgxpool.Pool) (drop func(), err error) {
	if name := os.Getenv("SKIPLOCK_DEMO_SCHEMA"); name != "" {
		// The demo writes the name into its own SQL: only a plain lower-case name will do.
		schema = name
		if !regexp.MustCompile(`^[a-z_][a-z0-9_]{0,47}$`).MatchString(schema) {
			return nil, fmt.Errorf("SKIPLOCK_DEMO_SCHEMA %q: use [a-z_][a-z0-9_], 1-48 characters", schema)
		}
		return func() {}, nil
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	schema = "skiplock_demo_" + hex.EncodeToString(b[:])
	return func() {
		// Dropped even after an interrupt: ctx is done by then.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_, _ = pool.Exec(dctx, `DROP SCHEMA IF EXISTS `+schema+` CASCADE`)
	}, nil
}

// migrate gives schema a fresh start: skiplock's tables (skiplock.Migrate) and the
// application's orders table beside them. It returns a client on the schema.
func migrate(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) (*skiplock.Client, error) {
	if _, err := pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+schema+` CASCADE`); err != nil {
		return nil, err
	}
	if err := skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema}); err != nil {
		return nil, err
	}
	if err := createOrders(ctx, pool, schema); err != nil {
		return nil, err
	}
	return skiplock.NewClient(pool, skiplock.Config{Schema: schema, Logger: logger})
}

// rollBackOrder places an order whose transaction rolls back, and shows that neither the
// order nor its job is left.
func rollBackOrder(ctx context.Context, pool *pgxpool.Pool, client *skiplock.Client) error {
	if _, err := placeOrder(ctx, pool, client, "bob@example.com", false); err != nil {
		return err
	}
	var orders, jobs int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.orders WHERE email = 'bob@example.com'`).Scan(&orders); err != nil {
		return err
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.jobs WHERE payload->>'email' = 'bob@example.com'`).Scan(&jobs); err != nil {
		return err
	}
	fmt.Printf("   after the rollback: %d order and %d job for bob@example.com — no order, no job\n", orders, jobs)
	return nil
}

// enqueueFlakyAndBurst enqueues one job that fails twice before it succeeds, and 10,000
// small jobs in one EnqueueMany (one COPY).
func enqueueFlakyAndBurst(ctx context.Context, client *skiplock.Client) error {
	if _, err := client.Enqueue(ctx, SyncInventory{SKU: "SKU-42"}, nil); err != nil {
		return err
	}
	burst := make([]skiplock.EnqueueParams, 10_000)
	for i := range burst {
		burst[i] = skiplock.EnqueueParams{Args: Thumbnail{ImageID: i}}
	}
	if _, err := client.EnqueueMany(ctx, burst); err != nil {
		return err
	}
	fmt.Println("   enqueued 10,001 jobs (the burst with one COPY)")
	return nil
}

// newWorker makes a worker of 20 on the default queue, with a short retry backoff for the
// demo, and registers the handlers.
func newWorker(pool *pgxpool.Pool, client *skiplock.Client, logger *slog.Logger) (*skiplock.Worker, error) {
	w, err := skiplock.NewWorker(client, skiplock.WorkerConfig{
		Queues:       map[string]skiplock.QueueConfig{"default": {MaxWorkers: 20}},
		RetryPolicy:  skiplock.BackoffPolicy{Base: 150 * time.Millisecond}, // seconds in production; short for the demo
		PollInterval: 100 * time.Millisecond,
		Logger:       logger,
	})
	if err != nil {
		return nil, err
	}
	if err := (&handlers{pool: pool, schema: schema, out: os.Stdout}).register(w); err != nil {
		return nil, err
	}
	return w, nil
}

// runUntilDone runs w, printing the jobs by status every 250ms, until no job is queued or
// running; then it stops w.
func runUntilDone(ctx context.Context, pool *pgxpool.Pool, w *skiplock.Worker) error {
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	began := time.Now()
	tick := time.NewTicker(250 * time.Millisecond)
	for {
		select {
		case <-ctx.Done():
			cancel()
			<-done
			return ctx.Err()
		case <-tick.C:
		}
		counts, err := countByStatus(ctx, pool)
		if err != nil {
			cancel()
			<-done
			return err
		}
		pending := counts["queued"] + counts["running"]
		fmt.Printf("   … %5.2fs  queued %4d  running %3d  succeeded %4d  dead %d\n",
			time.Since(began).Seconds(), counts["queued"], counts["running"], counts["succeeded"], counts["dead"])
		if pending == 0 {
			break
		}
	}
	tick.Stop()
	cancel()
	return <-done
}

// createOrders makes the application's own table, beside skiplock's in schema.
func createOrders(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	_, err := pool.Exec(ctx, `CREATE TABLE `+schema+`.orders (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, email text NOT NULL, emailed_at timestamptz)`)
	return err
}

// handlers holds what the job handlers need: the database and where to print.
type handlers struct {
	pool   *pgxpool.Pool
	schema string
	out    io.Writer
	flaky  atomic.Int32 // calls to the inventory service so far
}

// register registers a handler for each job kind on w.
func (h *handlers) register(w *skiplock.Worker) error {
	return errors.Join(
		skiplock.Handle(w, h.sendConfirmation),
		skiplock.Handle(w, h.syncInventory),
		skiplock.Handle(w, h.thumbnail),
	)
}

// sendConfirmation emails the customer. Idempotent: the UPDATE is a no-op when the email
// was already recorded, so a second run after a crash sends nothing twice.
func (h *handlers) sendConfirmation(ctx context.Context, job *skiplock.Job[SendConfirmation]) error {
	tag, err := h.pool.Exec(ctx, `UPDATE `+h.schema+`.orders SET emailed_at = now() WHERE id = $1 AND emailed_at IS NULL`, job.Args.OrderID)
	if err == nil && tag.RowsAffected() == 1 {
		fmt.Fprintf(h.out, "   ✉  job %d: confirmation for order %d sent to %s\n", job.ID, job.Args.OrderID, job.Args.Email)
	}
	return err
}

// syncInventory calls a flaky inventory service: its first two calls time out.
func (h *handlers) syncInventory(ctx context.Context, job *skiplock.Job[SyncInventory]) error {
	if n := h.flaky.Add(1); n <= 2 {
		fmt.Fprintf(h.out, "   ✗  job %d: inventory service timed out (attempt %d) — will retry with backoff\n", job.ID, job.Attempts)
		return errors.New("inventory service: timeout")
	}
	fmt.Fprintf(h.out, "   ✓  job %d: inventory for %s synced on attempt %d\n", job.ID, job.Args.SKU, job.Attempts)
	return nil
}

// thumbnail pretends to resize an image.
func (h *handlers) thumbnail(ctx context.Context, job *skiplock.Job[Thumbnail]) error {
	time.Sleep(3 * time.Millisecond)
	return nil
}

// placeOrder writes an order and its confirmation job in one transaction, then commits
// or rolls back.
func placeOrder(ctx context.Context, pool *pgxpool.Pool, client *skiplock.Client, email string, commit bool) (int64, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after commit
	var id int64
	if err := tx.QueryRow(ctx, `INSERT INTO `+client.Schema()+`.orders (email) VALUES ($1) RETURNING id`, email).Scan(&id); err != nil {
		return 0, err
	}
	job, err := client.EnqueueTx(ctx, tx, SendConfirmation{OrderID: id, Email: email}, nil)
	if err != nil {
		return 0, err
	}
	if !commit {
		fmt.Printf("   order %d and job %d written, then the transaction rolls back\n", id, job.ID)
		return id, tx.Rollback(ctx)
	}
	return id, tx.Commit(ctx)
}

func countByStatus(ctx context.Context, pool *pgxpool.Pool) (map[string]int, error) {
	rows, err := pool.Query(ctx, `SELECT status, count(*) FROM `+schema+`.jobs GROUP BY status
		UNION ALL SELECT status, count(*) FROM `+schema+`.jobs_archive GROUP BY status`)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	var status string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&status, &n}, func() error { out[status] += n; return nil })
	return out, err
}

func printTable(ctx context.Context, pool *pgxpool.Pool) error {
	rows, err := pool.Query(ctx, `SELECT kind, status, count(*), max(attempts) FROM (
		SELECT kind, status, attempts FROM `+schema+`.jobs
		UNION ALL SELECT kind, status, attempts FROM `+schema+`.jobs_archive) j
		GROUP BY kind, status ORDER BY kind, status`)
	if err != nil {
		return err
	}
	type line struct {
		kind, status   string
		n, maxAttempts int
	}
	var lines []line
	var l line
	if _, err := pgx.ForEachRow(rows, []any{&l.kind, &l.status, &l.n, &l.maxAttempts}, func() error {
		lines = append(lines, l)
		return nil
	}); err != nil {
		return err
	}
	sort.Slice(lines, func(i, j int) bool { return lines[i].kind < lines[j].kind })
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "   KIND\tSTATUS\tJOBS\tMAX ATTEMPTS")
	for _, l := range lines {
		fmt.Fprintf(tw, "   %s\t%s\t%d\t%d\n", l.kind, l.status, l.n, l.maxAttempts)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Println("\ndone: every job reached a final state.")
	return nil
}

func step(title, format string, args ...any) {
	fmt.Printf("\n== %s", title)
	if format != "" {
		fmt.Printf(": "+format, args...)
	}
	fmt.Println()
}

// redact hides a password in a connection string.
func redact(url string) string {
	if at := strings.LastIndex(url, "@"); at > 0 {
		if i := strings.Index(url, "://"); i >= 0 && i+3 < at {
			return url[:i+3] + "…" + url[at:]
		}
	}
	return url
}
