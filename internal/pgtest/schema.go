package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

const (
	// maxSchemaLen keeps schema names short enough to read in logs and to prefix other
	// identifiers with, well under Postgres' 63-byte limit.
	maxSchemaLen = 40
	// schemaPrefix makes every name start with a letter and marks it as a test schema.
	schemaPrefix = "t_"
	// schemaSuffixBytes of randomness keep parallel tests, and reruns, apart.
	schemaSuffixBytes = 4
)

// Schema creates an empty schema with a fresh name on [URL] and returns the name, such as
// "t_testqueue_claims_9f3a12bc": "t_", the test name lowercased with runs of other characters
// turned into "_" and truncated, "_" and 8 random hex digits; at most 40 characters of
// [a-z0-9_]. When the test ends the schema is dropped with everything in it, unless the test
// failed and $PGTEST_KEEP is "1"; the log then names it. Every test takes its own, so tests
// can run in parallel.
func Schema(tb testing.TB) string {
	tb.Helper()
	url := URL(tb)
	suffix := make([]byte, schemaSuffixBytes)
	_, _ = rand.Read(suffix) // never fails
	name := schemaName(tb.Name(), hex.EncodeToString(suffix))

	ctx, cancel := context.WithTimeout(context.Background(), poolTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		tb.Fatalf("pgtest: cannot connect to the test database to create a schema: %v", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "create schema "+pgx.Identifier{name}.Sanitize()); err != nil {
		tb.Fatalf("pgtest: cannot create schema %s: %v; the user of the test database needs the CREATE privilege on it", name, err)
	}
	tb.Cleanup(func() { dropSchema(tb, url, name) })
	return name
}

// dropSchema drops the schema of a finished test, or keeps it for PGTEST_KEEP=1.
func dropSchema(tb testing.TB, url, name string) {
	tb.Helper()
	if tb.Failed() && os.Getenv("PGTEST_KEEP") == "1" {
		tb.Logf("pgtest: kept schema %s of the failed test (PGTEST_KEEP=1); drop it with: drop schema %s cascade", name, name)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), poolTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		tb.Errorf("pgtest: cannot connect to drop schema %s: %v", name, err)
		return
	}
	defer conn.Close(context.Background())
	// A transaction of the test left open would block the drop forever: give up instead.
	if _, err := conn.Exec(ctx, "set lock_timeout = '10s'"); err != nil {
		tb.Errorf("pgtest: cannot drop schema %s: %v", name, err)
		return
	}
	if _, err := conn.Exec(ctx, "drop schema if exists "+pgx.Identifier{name}.Sanitize()+" cascade"); err != nil {
		tb.Errorf("pgtest: cannot drop schema %s: %v; end the test's transactions and close its pools before it returns", name, err)
	}
}

// schemaName builds the name Schema documents from a test name and a random hex suffix.
func schemaName(testName, suffix string) string {
	var b strings.Builder
	gap := false
	for _, r := range strings.ToLower(testName) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			if gap && b.Len() > 0 {
				b.WriteByte('_')
			}
			b.WriteRune(r)
			gap = false
		} else {
			gap = true
		}
	}
	body := b.String()
	if room := maxSchemaLen - len(schemaPrefix) - len("_") - len(suffix); len(body) > room {
		body = strings.TrimRight(body[:room], "_")
	}
	if body == "" {
		return schemaPrefix + suffix
	}
	return schemaPrefix + body + "_" + suffix
}
