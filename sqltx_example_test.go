package skiplock_test

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/skiplock/skiplock"
)

// Enqueue inside a database/sql transaction, as a service on sqlc, GORM or sqlx over
// pgx's stdlib driver holds one: the job exists exactly when the transaction commits.
func ExampleClient_EnqueueSQLTx() {
	pool, schema, cleanup := examplePool()
	defer cleanup()
	ctx := context.Background()
	_ = skiplock.Migrate(ctx, pool, skiplock.MigrateConfig{Schema: schema})
	client, _ := skiplock.NewClient(pool, skiplock.Config{Schema: schema})

	db := stdlib.OpenDBFromPool(pool) // or sql.Open("pgx", url)
	defer db.Close()

	tx, _ := db.BeginTx(ctx, nil)
	_, _ = client.EnqueueSQLTx(ctx, tx, SendEmail{To: "ada@example.com"}, nil)
	_ = tx.Rollback() // rolled back: no job

	tx, _ = db.BeginTx(ctx, &sql.TxOptions{})
	job, _ := client.EnqueueSQLTx(ctx, tx, SendEmail{To: "bob@example.com"}, nil)
	_ = tx.Commit() // committed: one queued job

	jobs, _ := client.List(ctx, skiplock.ListParams{Kind: "send_email"})
	fmt.Println(len(jobs), jobs[0].ID == job.ID, jobs[0].Status)
	// Output:
	// 1 true queued
}
