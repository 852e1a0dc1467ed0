package skiplock_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
)

func TestEnqueueTx_RollbackLeavesNoJobAndNoNotification(t *testing.T) {
	t.Parallel()
	b := setup(t)

	// A separate session LISTENs on the schema's channel.
	lconn, err := pgx.Connect(b.ctx, pgtest.URL(t))
	require.NoError(t, err)
	defer lconn.Close(b.ctx)
	_, err = lconn.Exec(b.ctx, `LISTEN "`+b.schema+`_jobs"`)
	require.NoError(t, err)
	noNotification := func(wait time.Duration) {
		ctx, cancel := context.WithTimeout(b.ctx, wait)
		defer cancel()
		n, err := lconn.WaitForNotification(ctx)
		require.Error(t, err, "unexpected notification %+v", n)
	}

	// Rolled back: no row, no notification.
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	job, err := b.client.EnqueueTx(b.ctx, tx, emailArgs{OrderID: 1}, nil)
	require.NoError(t, err)
	require.NotZero(t, job.ID)
	noNotification(200 * time.Millisecond) // not before the end of the transaction
	require.NoError(t, tx.Rollback(b.ctx))
	noNotification(200 * time.Millisecond)
	assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.jobs`))

	// Committed: one queued row, and the notification arrives only after the commit.
	tx, err = b.pool.Begin(b.ctx)
	require.NoError(t, err)
	job, err = b.client.EnqueueTx(b.ctx, tx, emailArgs{OrderID: 2}, nil)
	require.NoError(t, err)
	noNotification(200 * time.Millisecond)
	require.NoError(t, tx.Commit(b.ctx))
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	n, err := lconn.WaitForNotification(ctx)
	require.NoError(t, err)
	assert.Equal(t, "default", n.Payload)

	got, err := b.client.Get(b.ctx, job.ID)
	require.NoError(t, err)
	assert.Equal(t, skiplock.StatusQueued, got.Status)
	assert.Equal(t, "send_email", got.Kind)
	assert.JSONEq(t, `{"order_id":2,"to":""}`, string(got.Payload))
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE status = 'queued'`))
}

func TestEnqueue_DefaultsAndOptions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	job, err := b.client.Enqueue(b.ctx, noopArgs{N: 1}, nil)
	require.NoError(t, err)
	assert.Equal(t, "default", job.Queue)
	assert.Equal(t, 0, job.Priority)
	assert.Equal(t, 20, job.MaxAttempts)
	assert.Equal(t, 0, job.Attempts)
	assert.Equal(t, skiplock.StatusQueued, job.Status)
	assert.WithinDuration(t, time.Now(), job.RunAt, 5*time.Second)

	at := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	job, err = b.client.Enqueue(b.ctx, noopArgs{N: 2}, &skiplock.EnqueueOptions{
		Queue: "mail", Priority: 5, RunAt: at, MaxAttempts: 3, UniqueKey: "k1",
	})
	require.NoError(t, err)
	assert.Equal(t, "mail", job.Queue)
	assert.Equal(t, 5, job.Priority)
	assert.Equal(t, 3, job.MaxAttempts)
	assert.True(t, at.Equal(job.RunAt), "run_at %v, want %v", job.RunAt, at)
	assert.Equal(t, "k1", job.UniqueKey)

	// The same unique key while the first is active: the existing job and ErrDuplicateJob.
	dup, err := b.client.Enqueue(b.ctx, noopArgs{N: 3}, &skiplock.EnqueueOptions{Queue: "mail", UniqueKey: "k1"})
	require.ErrorIs(t, err, skiplock.ErrDuplicateJob)
	require.NotNil(t, dup)
	assert.Equal(t, job.ID, dup.ID)
	assert.Equal(t, 2, b.count(t, `SELECT count(*) FROM {s}.jobs`))
}

// statementCounter is a pgx tracer that counts the statements and COPYs a pool sends.
type statementCounter struct {
	mu     sync.Mutex
	sqls   []string
	copies int
}

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.mu.Lock()
	c.sqls = append(c.sqls, d.SQL)
	c.mu.Unlock()
	return ctx
}
func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *statementCounter) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceCopyFromStartData) context.Context {
	c.mu.Lock()
	c.copies++
	c.mu.Unlock()
	return ctx
}
func (c *statementCounter) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {}

func (c *statementCounter) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.sqls) + c.copies
}

func TestEnqueueMany_ConstantStatements(t *testing.T) {
	t.Parallel()
	b := setup(t)
	counter := &statementCounter{}
	pool := newPoolWith(t, func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = counter })
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: b.schema})
	require.NoError(t, err)

	statementsFor := func(n int, opts func(i int) *skiplock.EnqueueOptions) int {
		params := make([]skiplock.EnqueueParams, n)
		for i := range params {
			params[i] = skiplock.EnqueueParams{Args: noopArgs{N: i}, Options: opts(i)}
		}
		before := counter.total()
		got, err := client.EnqueueMany(b.ctx, params)
		require.NoError(t, err)
		require.Equal(t, n, got)
		return counter.total() - before
	}
	plain := func(int) *skiplock.EnqueueOptions { return nil }
	// Up to 100 jobs share one coalesced statement with concurrent calls: one statement,
	// its own commit included. Beyond, COPY in a transaction of its own.
	assert.Equal(t, 1, statementsFor(10, plain), "a small EnqueueMany is one coalesced statement")
	small := statementsFor(200, plain)
	big := statementsFor(10_000, plain)
	assert.Equal(t, small, big, "200 and 10,000 jobs must cost the same number of statements")
	assert.LessOrEqual(t, big, 6)
	assert.Equal(t, 10_210, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE status = 'queued'`))

	// Mixed: scheduled jobs, several queues, unique keys: still constant.
	call := 0
	mixed := func(i int) *skiplock.EnqueueOptions {
		if i == 0 {
			call++
		}
		o := &skiplock.EnqueueOptions{Queue: []string{"a", "b"}[i%2]}
		if i%3 == 0 {
			o.RunAt = time.Now().Add(time.Hour)
		}
		if i%5 == 0 {
			o.UniqueKey = fmt.Sprintf("u%d-%d", call, i)
		}
		return o
	}
	assert.Equal(t, statementsFor(10, mixed), statementsFor(10_000, mixed))
	assert.Equal(t, 4+3334, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE run_at > now() + interval '30 minutes'`))
}

func TestEnqueueManyTx_RollbackLeavesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	n, err := b.client.EnqueueManyTx(b.ctx, tx, []skiplock.EnqueueParams{{Args: noopArgs{1}}, {Args: noopArgs{2}}})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.NoError(t, tx.Rollback(b.ctx))
	assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.jobs`))
}

type badKindArgs struct{ kind string }

func (a badKindArgs) Kind() string { return a.kind }

type unmarshalable struct {
	C chan int
}

func (unmarshalable) Kind() string { return "unmarshalable" }

type failingMarshal struct{}

func (failingMarshal) Kind() string                 { return "failing_marshal" }
func (failingMarshal) MarshalJSON() ([]byte, error) { return nil, errors.New("boom") }

type bigArgs struct {
	Blob string `json:"blob"`
}

func (bigArgs) Kind() string { return "big" }

func TestEnqueue_BadInputWritesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	var nilPtr *emailPtrArgs

	cases := []struct {
		name string
		ctx  context.Context
		args skiplock.JobArgs
		opts *skiplock.EnqueueOptions
		want error
	}{
		{"nil args", b.ctx, nil, nil, skiplock.ErrNilArgs},
		{"nil pointer args", b.ctx, nilPtr, nil, skiplock.ErrNilArgs},
		{"empty kind", b.ctx, badKindArgs{""}, nil, skiplock.ErrInvalidKind},
		{"kind too long", b.ctx, badKindArgs{strings.Repeat("k", 256)}, nil, skiplock.ErrInvalidKind},
		{"queue with space", b.ctx, noopArgs{}, &skiplock.EnqueueOptions{Queue: "a b"}, skiplock.ErrInvalidQueue},
		{"queue upper case", b.ctx, noopArgs{}, &skiplock.EnqueueOptions{Queue: "Mail"}, skiplock.ErrInvalidQueue},
		{"queue too long", b.ctx, noopArgs{}, &skiplock.EnqueueOptions{Queue: strings.Repeat("q", 65)}, skiplock.ErrInvalidQueue},
		{"queue injection", b.ctx, noopArgs{}, &skiplock.EnqueueOptions{Queue: "x'; drop table jobs; --"}, skiplock.ErrInvalidQueue},
		{"unmarshalable payload", b.ctx, unmarshalable{C: make(chan int)}, nil, skiplock.ErrInvalidPayload},
		{"failing marshaler", b.ctx, failingMarshal{}, nil, skiplock.ErrInvalidPayload},
		{"payload over 1 MiB", b.ctx, bigArgs{Blob: strings.Repeat("x", 1<<20)}, nil, skiplock.ErrPayloadTooLarge},
		{"max attempts zero after defaults is fine, negative is not", b.ctx, noopArgs{}, &skiplock.EnqueueOptions{MaxAttempts: -1}, skiplock.ErrInvalidOptions},
		{"priority out of range", b.ctx, noopArgs{}, &skiplock.EnqueueOptions{Priority: math.MaxInt32}, skiplock.ErrInvalidOptions},
		{"cancelled context", cancelled, noopArgs{}, nil, context.Canceled},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := b.client.Enqueue(tc.ctx, tc.args, tc.opts)
			require.ErrorIs(t, err, tc.want)

			tx, err := b.pool.Begin(b.ctx)
			require.NoError(t, err)
			_, err = b.client.EnqueueTx(tc.ctx, tx, tc.args, tc.opts)
			require.ErrorIs(t, err, tc.want)
			require.NoError(t, tx.Commit(b.ctx), "a rejected job must not abort the caller's transaction")

			// One bad job in a batch rejects the whole batch before anything is written.
			_, err = b.client.EnqueueMany(tc.ctx, []skiplock.EnqueueParams{{Args: noopArgs{}}, {Args: tc.args, Options: tc.opts}})
			require.ErrorIs(t, err, tc.want)
		})
	}
	assert.Equal(t, 0, b.count(t, `SELECT count(*) FROM {s}.jobs`))
}

type emailPtrArgs struct{ To string }

func (*emailPtrArgs) Kind() string { return "email_ptr" }

func TestClient_PayloadLimitIsConfigurable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	small, err := skiplock.NewClient(b.pool, skiplock.Config{Schema: b.schema, MaxPayloadBytes: 64})
	require.NoError(t, err)
	_, err = small.Enqueue(b.ctx, bigArgs{Blob: strings.Repeat("x", 100)}, nil)
	require.ErrorIs(t, err, skiplock.ErrPayloadTooLarge)
	_, err = small.Enqueue(b.ctx, bigArgs{Blob: "ok"}, nil)
	require.NoError(t, err)
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs`))
}

func TestNewClient_RejectsInvalidSchema(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	for _, s := range []string{"Bad", "a-b", "1abc", `x"; drop schema public; --`, strings.Repeat("s", 49), "pg_jobs", "pg_"} {
		_, err := skiplock.NewClient(pool, skiplock.Config{Schema: s})
		assert.ErrorIs(t, err, skiplock.ErrInvalidSchema, s)
		err = skiplock.Migrate(context.Background(), pool, skiplock.MigrateConfig{Schema: s})
		assert.ErrorIs(t, err, skiplock.ErrInvalidSchema, s)
	}
}

func TestClient_NotMigratedSchemaSaysSo(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: pgtest.Schema(t)})
	require.NoError(t, err)
	_, err = client.Enqueue(context.Background(), noopArgs{}, nil)
	require.ErrorIs(t, err, skiplock.ErrNotMigrated)
	assert.Contains(t, err.Error(), "Migrate")
}

func TestEnqueueOptions_PerKindDefaults(t *testing.T) {
	t.Parallel()
	b := setup(t)
	job, err := b.client.Enqueue(b.ctx, reportArgs{}, nil)
	require.NoError(t, err)
	assert.Equal(t, "reports", job.Queue)
	assert.Equal(t, 3, job.MaxAttempts)
	job, err = b.client.Enqueue(b.ctx, reportArgs{}, &skiplock.EnqueueOptions{MaxAttempts: 9})
	require.NoError(t, err)
	assert.Equal(t, "reports", job.Queue)
	assert.Equal(t, 9, job.MaxAttempts)
}

type reportArgs struct{}

func (reportArgs) Kind() string { return "report" }
func (reportArgs) EnqueueOptions() skiplock.EnqueueOptions {
	return skiplock.EnqueueOptions{Queue: "reports", MaxAttempts: 3}
}
