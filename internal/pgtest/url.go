package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Time limits for finding a server.
const (
	// urlCheckTimeout bounds connecting to $DATABASE_URL.
	urlCheckTimeout = 10 * time.Second
	// localProbeTimeout bounds the probe of 127.0.0.1:5432, so that a machine without a
	// server moves on quickly.
	localProbeTimeout = 2 * time.Second
	// throwawayTimeout bounds initdb and the first start of a throwaway cluster.
	throwawayTimeout = 2 * time.Minute
	// poolTimeout bounds opening and pinging a pool, and creating or dropping a schema.
	poolTimeout = 30 * time.Second
)

// localURL is the server step 2 of URL probes; the database is filled in. Its
// connect_timeout bounds every connection the tests open later, not the probe (which has
// localProbeTimeout): on a loaded 2-core machine under -race, 32 connections opened at once
// have taken over 2 s to be forked.
const localURL = "postgres://postgres@127.0.0.1:5432/%s?sslmode=disable&connect_timeout=15"

// Values of $PGTEST_FORCE.
const (
	forceInitdb = "initdb"
	forceDocker = "docker"
)

// found is the server URL finds once per process.
var found struct {
	once sync.Once
	url  string
	err  error
}

// URL returns the connection string of a working PostgreSQL database, found on the first call
// in the process and reused after: $DATABASE_URL, else a server on 127.0.0.1:5432, else a
// throwaway cluster, else a Docker container (see the package documentation for the details
// and for $PGTEST_FORCE). When none works it fails tb with the reasons and what to install or
// start. Safe for concurrent use; concurrent first callers wait for the one search.
func URL(tb testing.TB) string {
	tb.Helper()
	found.once.Do(func() { found.url, found.err = findServer(tb) })
	if found.err != nil {
		tb.Fatal(found.err.Error())
	}
	return found.url
}

// Pool returns a new pool connected to [URL], closed when tb's test ends. It has pgxpool's
// default size and has answered a ping.
func Pool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	url := URL(tb)
	ctx, cancel := context.WithTimeout(context.Background(), poolTimeout)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		tb.Fatalf("pgtest: cannot configure a pool for the test database: %v", err)
	}
	tb.Cleanup(pool.Close)
	if err := pool.Ping(ctx); err != nil {
		tb.Fatalf("pgtest: the test database stopped answering: %v; check that the server found at the start of the run is still up", err)
	}
	return pool
}

// findServer runs the search URL describes and returns the URL or an error saying what to do.
func findServer(tb testing.TB) (string, error) {
	tb.Helper()
	force := os.Getenv("PGTEST_FORCE")
	switch force {
	case "", forceInitdb, forceDocker:
	default:
		return "", fmt.Errorf("pgtest: PGTEST_FORCE=%q is not understood: use %q, %q, or leave it empty", force, forceInitdb, forceDocker)
	}
	var tried []string

	if force == "" {
		if url := os.Getenv("DATABASE_URL"); url != "" {
			ctx, cancel := context.WithTimeout(context.Background(), urlCheckTimeout)
			defer cancel()
			if err := ping(ctx, url); err != nil {
				return "", fmt.Errorf("pgtest: DATABASE_URL is set but the database does not answer: %v; fix DATABASE_URL or start that server, or unset DATABASE_URL to let pgtest find or start one", err)
			}
			tb.Logf("pgtest: using the database of DATABASE_URL")
			return url, nil
		}
		tried = append(tried, "DATABASE_URL: not set")

		url, err := probeLocal()
		if err == nil {
			tb.Logf("pgtest: using the server on 127.0.0.1:5432")
			return url, nil
		}
		tried = append(tried, "127.0.0.1:5432: "+err.Error())
	}

	if force == "" || force == forceInitdb {
		ctx, cancel := context.WithTimeout(context.Background(), throwawayTimeout)
		defer cancel()
		c, err := startThrowaway(ctx)
		if err == nil {
			tb.Logf("pgtest: started a throwaway cluster in %s on port %d (stopped and removed when the test process exits)", c.Dir, c.Port)
			return c.URL(), nil
		}
		if force == forceInitdb {
			return "", fmt.Errorf("pgtest: PGTEST_FORCE=initdb, but no throwaway cluster could be started: %w", err)
		}
		tried = append(tried, "throwaway cluster: "+err.Error())
	}

	url, err := startContainer(tb)
	if err == nil {
		return url, nil
	}
	if force == forceDocker {
		return "", fmt.Errorf("pgtest: PGTEST_FORCE=docker, but no container could be started: %w", err)
	}
	tried = append(tried, "Docker: "+err.Error())

	return "", errors.New("pgtest: no PostgreSQL server for the tests. Tried:\n  - " +
		strings.Join(tried, "\n  - ") +
		"\nTo fix, do one of: install the PostgreSQL server (apt-get install postgresql) so that" +
		" pgtest can start a throwaway cluster; start a server on 127.0.0.1:5432 that trusts user" +
		" postgres; set DATABASE_URL=postgres://user:password@host:port/db; or start Docker.")
}

// probeLocal returns the URL of the server on 127.0.0.1:5432 as user postgres, on database
// "test" if it exists, else "postgres".
func probeLocal() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), localProbeTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, fmt.Sprintf(localURL, "postgres"))
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	var hasTest bool
	err = conn.QueryRow(ctx, `select exists (select from pg_database where datname = 'test')`).Scan(&hasTest)
	if err != nil {
		return "", err
	}
	if hasTest {
		return fmt.Sprintf(localURL, "test"), nil
	}
	return fmt.Sprintf(localURL, "postgres"), nil
}

// ping connects to url and runs a query.
func ping(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var one int
	return conn.QueryRow(ctx, "select 1").Scan(&one)
}

// Connect opens a connection to url (within 10 s, else it fails tb) that tb's cleanup
// closes.
func Connect(tb testing.TB, url string) *pgx.Conn {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		tb.Fatalf("pgtest: connect: %v", err)
	}
	tb.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}
