package skiplock_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// grantsBlock extracts the SQL between the grants markers of README.md, so that the test
// runs exactly what the README tells users to run.
var grantsBlock = regexp.MustCompile("(?s)<!-- grants:begin -->\\s*```sql\\n(.*?)```\\s*<!-- grants:end -->")

// privRoles are the names one test uses in place of the README's: roles are global to the
// server, so each test gets its own, dropped when it ends.
type privRoles struct {
	owner, app, schema, password string
}

// readmeGrants returns the README's GRANT block with the README's role and schema names
// replaced by r's.
func readmeGrants(t *testing.T, r privRoles) string {
	t.Helper()
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	m := grantsBlock.FindSubmatch(readme)
	require.NotNil(t, m, "README.md has no ```sql block between <!-- grants:begin --> and <!-- grants:end -->")
	sql := string(m[1])
	sql = regexp.MustCompile(`\bskiplock_owner\b`).ReplaceAllString(sql, pgx.Identifier{r.owner}.Sanitize())
	sql = regexp.MustCompile(`\bskiplock_app\b`).ReplaceAllString(sql, pgx.Identifier{r.app}.Sanitize())
	sql = regexp.MustCompile(`\bskiplock\b`).ReplaceAllString(sql, pgx.Identifier{r.schema}.Sanitize())
	return sql
}

// setupPrivileges runs the README's GRANT block for fresh roles and a fresh schema (all
// dropped at cleanup) and returns the roles and a pool for each of them.
func setupPrivileges(t *testing.T) (r privRoles, owner, app *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	hx := hex.EncodeToString(suffix)
	pw := make([]byte, 12)
	_, _ = rand.Read(pw)
	r = privRoles{owner: "t_owner_" + hx, app: "t_app_" + hx, schema: "t_priv_" + hx, password: hex.EncodeToString(pw)}

	admin := newPool(t, 2)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, q := range []string{
			`SET lock_timeout = '10s'`,
			`DROP SCHEMA IF EXISTS ` + pgx.Identifier{r.schema}.Sanitize() + ` CASCADE`,
			// Privileges and default privileges granted to or by the roles, in this database.
			`DROP OWNED BY ` + pgx.Identifier{r.app}.Sanitize() + `, ` + pgx.Identifier{r.owner}.Sanitize(),
			`DROP ROLE IF EXISTS ` + pgx.Identifier{r.app}.Sanitize(),
			`DROP ROLE IF EXISTS ` + pgx.Identifier{r.owner}.Sanitize(),
		} {
			conn, err := admin.Acquire(ctx)
			if err != nil {
				t.Errorf("cleanup: %v", err)
				return
			}
			if _, err := conn.Exec(ctx, q); err != nil && !strings.Contains(err.Error(), "does not exist") {
				t.Errorf("cleanup %q: %v", q, err)
			}
			conn.Release()
		}
	})
	// One transaction: a failed statement leaves no half-made roles.
	err := pgx.BeginFunc(ctx, admin, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, readmeGrants(t, r)); err != nil {
			return err
		}
		// Passwords, for servers that do not trust local connections.
		for _, role := range []string{r.owner, r.app} {
			if _, err := tx.Exec(ctx, `ALTER ROLE `+pgx.Identifier{role}.Sanitize()+` PASSWORD '`+r.password+`'`); err != nil {
				return err
			}
		}
		return nil
	})
	require.NoError(t, err, "running the README's GRANT block")
	return r, rolePool(t, r.owner, r.password), rolePool(t, r.app, r.password)
}

// rolePool opens a pool on the test database as role, closed at cleanup.
func rolePool(t *testing.T, role, password string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	require.NoError(t, err)
	cfg.ConnConfig.User = role
	cfg.ConnConfig.Password = password
	cfg.MaxConns = 6
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	var who string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT current_user`).Scan(&who))
	require.Equal(t, role, who)
	return pool
}

// requirePermissionDenied fails unless err is Postgres's insufficient_privilege.
func requirePermissionDenied(t *testing.T, err error, what string) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.Truef(t, errors.As(err, &pgErr), "%s: want permission denied, got %v", what, err)
	require.Equalf(t, "42501", pgErr.Code, "%s: want permission denied, got %v", what, err)
}

type privOK struct{}

func (privOK) Kind() string { return "priv_ok" }

type privFlaky struct{}

func (privFlaky) Kind() string { return "priv_flaky" }

type privDoomed struct{}

func (privDoomed) Kind() string { return "priv_doomed" }

type privHang struct{}

func (privHang) Kind() string { return "priv_hang" }

type privRetry struct{}

func (privRetry) NextRetry(*skiplock.JobRow) time.Duration { return 10 * time.Millisecond }

// TestPrivilege_QuickstartFlowRunsAsAppRole sets the roles up as the README says, migrates
// as the owner, then runs everything a service does as the app role: Migrate at start-up
// (nothing pending), Enqueue, EnqueueTx (commit and rollback), a worker whose jobs succeed,
// retry, die and get reclaimed from a vanished worker by the sweeper, Requeue and Stats.
func TestPrivilege_QuickstartFlowRunsAsAppRole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, ownerPool, appPool := setupPrivileges(t)
	mcfg := skiplock.MigrateConfig{Schema: r.schema}

	// The owner applies the migrations; the app role is not allowed to.
	_, err := appPool.Exec(ctx, `CREATE TABLE `+pgx.Identifier{r.schema, "x"}.Sanitize()+` (i int)`)
	requirePermissionDenied(t, err, "app role creating a table")
	requirePermissionDenied(t, skiplock.Migrate(ctx, appPool, mcfg), "app role applying a pending migration")
	require.NoError(t, skiplock.Migrate(ctx, ownerPool, mcfg), "owner role migrating its own schema")
	require.NoError(t, skiplock.Migrate(ctx, ownerPool, mcfg), "owner role, nothing pending")

	// Start-up of the service: Migrate finds nothing to do.
	require.NoError(t, skiplock.Migrate(ctx, appPool, mcfg), "app role, nothing pending")
	st, err := skiplock.GetMigrationStatus(ctx, appPool, mcfg)
	require.NoError(t, err)
	require.Equal(t, st.Latest, st.Current)
	requirePermissionDenied(t, skiplock.MigrateDown(ctx, appPool, mcfg), "app role reverting migrations")

	client, err := skiplock.NewClient(appPool, skiplock.Config{Schema: r.schema, Logger: testLogger()})
	require.NoError(t, err)

	// Enqueue, and EnqueueTx with a commit and a rollback.
	ok, err := client.Enqueue(ctx, privOK{}, nil)
	require.NoError(t, err)
	var inTx *skiplock.JobRow
	require.NoError(t, pgx.BeginFunc(ctx, appPool, func(tx pgx.Tx) error {
		inTx, err = client.EnqueueTx(ctx, tx, privOK{}, nil)
		return err
	}))
	tx, err := appPool.Begin(ctx)
	require.NoError(t, err)
	rolledBack, err := client.EnqueueTx(ctx, tx, privOK{}, nil)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	flaky, err := client.Enqueue(ctx, privFlaky{}, nil)
	require.NoError(t, err)
	doomed, err := client.Enqueue(ctx, privDoomed{}, &skiplock.EnqueueOptions{MaxAttempts: 2})
	require.NoError(t, err)
	// In a queue of its own, so that only the vanishing worker below claims it.
	hang, err := client.Enqueue(ctx, privHang{}, &skiplock.EnqueueOptions{Queue: "hang", MaxAttempts: 5})
	require.NoError(t, err)
	// Concurrent calls share coalesced statements, which write their keys with the role's
	// grants (a statement refused for a missing one would fall back, unseen, to one
	// statement per call). Their jobs stay in a queue no worker here serves.
	batches := func() (n int) {
		require.NoError(t, appPool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{r.schema, "enqueue_batches"}.Sanitize()).Scan(&n))
		return n
	}
	for round := 0; round < 20 && batches() == 0; round++ {
		together(20, func(int) {
			_, err := client.Enqueue(ctx, privOK{}, &skiplock.EnqueueOptions{Queue: "coalesced"})
			assert.NoError(t, err)
		})
	}
	require.Positive(t, batches(), "a coalesced statement committed as the app role")

	// A worker that, to the database, dies holding the hang job: a heartbeat period of
	// 20 minutes, a handler that makes the job's lease end at once (as if its heartbeats
	// had stopped) and names as its owner a worker of an earlier release (no row in the
	// workers table: a live worker of this release keeps its jobs), and then blocks until
	// the test ends.
	release := make(chan struct{})
	hangClaimed := make(chan struct{}, 5)
	vanishing, err := skiplock.NewWorker(client, skiplock.WorkerConfig{
		ID: "priv-vanishing", Queues: map[string]skiplock.QueueConfig{"hang": {MaxWorkers: 1}}, VisibilityTimeout: time.Hour, SweepInterval: -1, PollInterval: 50 * time.Millisecond,
		ShutdownTimeout: 5 * time.Second, Logger: testLogger(),
	})
	require.NoError(t, err)
	require.NoError(t, skiplock.Handle(vanishing, func(ctx context.Context, job *skiplock.Job[privHang]) error {
		_, err := appPool.Exec(context.Background(), `UPDATE `+pgx.Identifier{r.schema, "jobs"}.Sanitize()+
			` SET locked_at = now() - interval '2 seconds', lease_until = now() - interval '1 second', locked_by = 'old-' || locked_by WHERE id = $1`, job.ID)
		require.NoError(t, err)
		hangClaimed <- struct{}{}
		<-release
		return nil
	}))
	runWorker(t, vanishing)
	t.Cleanup(func() { close(release) }) // runs before runWorker's cleanup stops it
	<-hangClaimed

	// The service's worker, with its embedded sweeper, as the app role.
	var healed, hangRuns atomic.Bool
	w, err := skiplock.NewWorker(client, skiplock.WorkerConfig{
		ID: "priv-worker", Queues: map[string]skiplock.QueueConfig{"default": {}, "hang": {}}, PollInterval: 50 * time.Millisecond, VisibilityTimeout: time.Second,
		SweepInterval: 100 * time.Millisecond, RetryPolicy: privRetry{}, Logger: testLogger(),
	})
	require.NoError(t, err)
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[privOK]) error { return nil }))
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[privFlaky]) error {
		if job.Attempts == 1 {
			return errors.New("flaky: first attempt fails")
		}
		return nil
	}))
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[privDoomed]) error {
		if healed.Load() {
			return nil
		}
		return errors.New("doomed: always fails")
	}))
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[privHang]) error {
		hangRuns.Store(true)
		return nil
	}))
	stop := runWorker(t, w)
	defer stop()

	status := func(id int64) skiplock.JobStatus {
		j, err := client.Get(ctx, id)
		require.NoError(t, err)
		return j.Status
	}
	for _, id := range []int64{ok.ID, inTx.ID, flaky.ID} {
		eventually(t, 30*time.Second, func() bool { return status(id) == skiplock.StatusSucceeded }, "job %d succeeds", id)
	}
	eventually(t, 30*time.Second, func() bool { return status(doomed.ID) == skiplock.StatusDead }, "doomed job dies")
	// The sweeper takes the hang job back from the vanished worker; this worker runs it.
	eventually(t, 30*time.Second, func() bool { return status(hang.ID) == skiplock.StatusSucceeded }, "reclaimed job succeeds")
	assert.True(t, hangRuns.Load())
	_, err = client.Get(ctx, rolledBack.ID)
	require.ErrorIs(t, err, skiplock.ErrJobNotFound, "the rolled-back job does not exist")
	j, err := client.Get(ctx, flaky.ID)
	require.NoError(t, err)
	assert.Equal(t, 2, j.Attempts, "the flaky job was retried once")

	// Stats, then Requeue of the dead job, which now succeeds.
	stats, err := client.Stats(ctx)
	require.NoError(t, err)
	dead := map[string]int64{}
	for _, q := range stats { // queues with recently finished jobs are listed too
		if n := q.Counts[skiplock.StatusDead]; n > 0 {
			dead[q.Queue] = n
		}
	}
	assert.Equal(t, map[string]int64{"default": 1}, dead, "the hot table holds only the dead job")
	healed.Store(true)
	n, err := client.Requeue(ctx, skiplock.RequeueFilter{Kind: privDoomed{}.Kind()})
	require.NoError(t, err)
	require.Equal(t, skiplock.RequeueResult{Requeued: 1}, n)
	eventually(t, 30*time.Second, func() bool { return status(doomed.ID) == skiplock.StatusSucceeded }, "requeued job succeeds")

	// A sweep as the app role, with a retention short enough that it deletes archive rows.
	sw, err := skiplock.NewSweeper(client, skiplock.SweeperConfig{ArchiveRetention: time.Millisecond, Logger: testLogger()})
	require.NoError(t, err)
	var purged int64
	eventually(t, 30*time.Second, func() bool {
		res, err := sw.Sweep(ctx) // skipped while the worker's own sweeper holds the lock
		require.NoError(t, err)
		purged += res.Purged
		return purged > 0
	}, "a sweep as the app role deletes archived jobs")
}

// Workflows and sequences work as the app role with the README's grants: enqueue (which
// reserves job ids), release in the completion's transaction, inspection.
func TestPrivilege_WorkflowRunsAsAppRole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, ownerPool, appPool := setupPrivileges(t)
	require.NoError(t, skiplock.Migrate(ctx, ownerPool, skiplock.MigrateConfig{Schema: r.schema}))
	client, err := skiplock.NewClient(appPool, skiplock.Config{Schema: r.schema, Logger: testLogger()})
	require.NoError(t, err)
	wf, err := client.EnqueueWorkflow(ctx, skiplock.Workflow{Name: "priv", Tasks: []skiplock.WorkflowTask{
		{Name: "a", Args: privOK{}},
		{Name: "b", Args: privOK{}, DependsOn: []string{"a"}},
	}})
	require.NoError(t, err)
	_, err = client.EnqueueSequence(ctx, "k", privOK{}, nil)
	require.NoError(t, err)
	parent, err := client.Enqueue(ctx, privOK{}, nil)
	require.NoError(t, err)
	dep, err := client.Enqueue(ctx, privOK{}, &skiplock.EnqueueOptions{DependsOn: []int64{parent.ID}})
	require.NoError(t, err, "DependsOn as the app role")
	w, err := skiplock.NewWorker(client, skiplock.WorkerConfig{PollInterval: 50 * time.Millisecond, SweepInterval: -1, Logger: testLogger()})
	require.NoError(t, err)
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[privOK]) error { return nil }))
	runWorker(t, w)
	eventually(t, 30*time.Second, func() bool {
		info, err := client.GetWorkflow(ctx, wf.ID)
		require.NoError(t, err)
		return info.Task("b").State == "succeeded"
	}, "the workflow did not finish as the app role")
	eventually(t, 30*time.Second, func() bool {
		j, err := client.Get(ctx, dep.ID)
		require.NoError(t, err)
		return j.Status == skiplock.StatusSucceeded
	}, "the dependent did not run as the app role (the trigger runs with the worker's rights)")
}
