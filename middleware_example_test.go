package skiplock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/skiplock/skiplock"
)

type tenantKey struct{}

// reportErrors is an ErrorHandler: the one place a service sends failures to its error
// tracker or pager.
type reportErrors struct{ reported chan string }

func (r reportErrors) HandleError(_ context.Context, job *skiplock.JobRow, status skiplock.JobStatus, err error) {
	var pe *skiplock.PanicError
	if errors.As(err, &pe) {
		r.reported <- fmt.Sprintf("job %s panicked (%v), now %s", job.Kind, pe.Value, status)
		return
	}
	r.reported <- fmt.Sprintf("job %s failed: %v, now %s", job.Kind, err, status)
}

func (r reportErrors) HandleStuck(_ context.Context, job *skiplock.JobRow, timeout time.Duration) {
	r.reported <- fmt.Sprintf("job %s still running %s past its timeout", job.Kind, timeout)
}

// Wrap every handler with middleware — here one that puts the job's tenant (from its
// metadata) in the context — and report every failed attempt, panics with their stack.
func ExampleUse() {
	pool, schema, cleanup := examplePool()
	defer cleanup()
	ctx := context.Background()
	_ = skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema})
	client, _ := skiplock.NewClient(pool, skiplock.Config{Schema: schema})
	w, _ := skiplock.NewWorker(client, skiplock.WorkerConfig{})

	_ = skiplock.Use(w, func(next skiplock.JobHandler) skiplock.JobHandler {
		return func(ctx context.Context, job *skiplock.JobRow) error {
			return next(context.WithValue(ctx, tenantKey{}, job.Metadata["tenant"]), job)
		}
	})
	r := reportErrors{reported: make(chan string, 1)}
	_ = skiplock.HandleErrors(w, r)
	_ = skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[SendEmail]) error {
		panic(fmt.Sprintf("no mail server for tenant %s", ctx.Value(tenantKey{})))
	})

	_, _ = client.Enqueue(ctx, SendEmail{To: "ada@example.com"},
		&skiplock.EnqueueOptions{MaxAttempts: 1, Metadata: map[string]string{"tenant": "acme"}})
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error)
	go func() { stopped <- w.Run(runCtx) }()
	fmt.Println(<-r.reported)
	stop()
	<-stopped
	// Output:
	// job send_email panicked (no mail server for tenant acme), now dead
}
