// Package pgtest finds a real PostgreSQL server for tests and gives each test an isolated
// schema on it. Tests never use a mock database, and a missing database fails the run with a
// message saying how to get one: nothing here ever skips a test.
//
// [URL] finds a server once per test process, trying in order:
//
//  1. $DATABASE_URL, if set. If it does not answer, the run fails: there is no fall-through.
//  2. A server on 127.0.0.1:5432, user postgres without a password (trust auth), database
//     "test" if it exists, else "postgres". The probe gives up after about 2 seconds.
//  3. A throwaway cluster started with [StartCluster] in a fresh directory under
//     [os.TempDir], using initdb and pg_ctl found by [FindBin].
//  4. A container from testcontainers-go's Postgres module, only when a Docker socket is
//     there (DOCKER_HOST, /var/run/docker.sock, the rootless sockets) and the engine answers
//     within about 2 seconds. It is started by dockerpg, a program in a nested module of
//     its own (internal/pgtest/dockerpg, run with `go run`), so that testcontainers-go and
//     the Docker client stay out of skiplock's go.mod and out of its users' go.sum.
//
// When all of them fail, the calling test fails with each reason and what to install or start.
//
// The throwaway cluster of step 3 and the container of step 4 live for the whole test process.
// A small watchdog process, started next to the throwaway cluster, stops it and removes its
// directory when the test process exits (however it exits, since it notices the closing of a
// pipe); dockerpg removes the container the same way (and testcontainers' reaper after it).
//
// [Pool] and [Schema] build on [URL]. Every test takes its own schema, so tests run with
// t.Parallel. [Cluster] is a throwaway cluster owned by its caller, which can restart and stop
// it; the chaos harness uses it to have a server it may break. [StartStandby] adds a
// streaming standby of such a cluster, and [Cluster.Kill] and [Cluster.Promote] fail over to
// it (the failover chaos run).
//
// Environment variables:
//
//   - DATABASE_URL: the server to use (step 1).
//   - PGTEST_FORCE: "initdb" skips steps 1 and 2 and uses a throwaway cluster; "docker" skips
//     steps 1 to 3 and uses a container. Either fails the run if that source does not work.
//     Empty means try every step in order.
//   - PGTEST_KEEP: "1" keeps the schema of a failed test for inspection instead of dropping
//     it; the test log names the schema.
//
// initdb, pg_ctl and postgres refuse to run as root. When the test process is root, [StartCluster]
// runs them as the user "postgres" (or "nobody" when there is no such user), which must be able
// to reach the cluster directory: directories under [os.TempDir] with 0755 parents work.
package pgtest
