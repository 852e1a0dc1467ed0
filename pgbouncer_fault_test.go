package skiplock_test

// This file holds the coalesced enqueue's test through PgBouncer with a fault between the
// pooler and Postgres, and the TCP proxy that makes the fault.

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/pgbouncer"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// cutProxy forwards TCP connections (PgBouncer's server connections) to Postgres and cuts
// the answer to a statement whose Parse holds marker, faults times: it passes the
// statement's CommandComplete, then drops the ReadyForQuery that follows — which the
// server sends once the implicit transaction has committed — and closes both sides. The
// statement is committed; its sender never hears so.
type cutProxy struct {
	ln       net.Listener
	network  string // of the upstream: "tcp" or "unix"
	address  string
	marker   []byte
	faults   atomic.Int32 // cuts left to make
	cuts     atomic.Int32 // cuts made
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    []net.Conn
	upstream *pgconn.Config
}

// startCutProxy starts a proxy to the server of upstreamURL; it stops when the test ends.
func startCutProxy(t *testing.T, upstreamURL, marker string, faults int) *cutProxy {
	t.Helper()
	up, err := pgconn.ParseConfig(upstreamURL)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &cutProxy{ln: ln, network: "tcp", address: net.JoinHostPort(up.Host, strconv.Itoa(int(up.Port))),
		marker: []byte(marker), upstream: up}
	if strings.HasPrefix(up.Host, "/") {
		p.network, p.address = "unix", fmt.Sprintf("%s/.s.PGSQL.%d", up.Host, up.Port)
	}
	p.faults.Store(int32(faults))
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// url is a connection string to the upstream server through the proxy.
func (p *cutProxy) url() string {
	s := fmt.Sprintf("host=127.0.0.1 port=%d dbname=%s user=%s", p.ln.Addr().(*net.TCPAddr).Port, p.upstream.Database, p.upstream.User)
	if p.upstream.Password != "" {
		s += " password=" + p.upstream.Password
	}
	return s
}

func (p *cutProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *cutProxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial(p.network, p.address)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		var armed atomic.Bool
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			p.toServer(client, server, &armed)
		}()
		go func() {
			defer p.wg.Done()
			p.toClient(server, client, &armed)
		}()
	}
}

// toServer copies PgBouncer's messages to Postgres, and arms the connection when an
// Execute follows a Parse of a marked statement (the extended protocol sends both in one
// round trip, so on one server connection).
func (p *cutProxy) toServer(from, to net.Conn, armed *atomic.Bool) {
	defer func() { _ = to.Close() }()
	// The startup message has no type byte.
	var n [4]byte
	if _, err := io.ReadFull(from, n[:]); err != nil {
		return
	}
	body := make([]byte, binary.BigEndian.Uint32(n[:])-4)
	if _, err := io.ReadFull(from, body); err != nil {
		return
	}
	if _, err := to.Write(append(n[:], body...)); err != nil {
		return
	}
	marked := false
	for {
		typ, msg, err := readMessage(from)
		if err != nil {
			return
		}
		switch typ {
		case 'P':
			marked = bytes.Contains(msg, p.marker)
		case 'E':
			if marked && p.faults.Add(-1) >= 0 {
				armed.Store(true)
			}
		}
		if _, err := to.Write(msg); err != nil {
			return
		}
	}
}

// toClient copies Postgres's messages to PgBouncer; on an armed connection it passes the
// CommandComplete, drops the ReadyForQuery and closes both sides.
func (p *cutProxy) toClient(from, to net.Conn, armed *atomic.Bool) {
	defer func() { _ = to.Close() }()
	completed := false
	for {
		typ, msg, err := readMessage(from)
		if err != nil {
			return
		}
		if completed && typ == 'Z' {
			p.cuts.Add(1)
			_ = from.Close()
			return
		}
		if typ == 'C' && armed.Load() {
			completed = true
		}
		if _, err := to.Write(msg); err != nil {
			return
		}
	}
}

// readMessage reads one typed protocol message and returns its type and all its bytes.
func readMessage(r io.Reader) (byte, []byte, error) {
	var head [5]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return 0, nil, err
	}
	msg := make([]byte, 1+binary.BigEndian.Uint32(head[1:]))
	copy(msg, head[:])
	if _, err := io.ReadFull(r, msg[5:]); err != nil {
		return 0, nil, err
	}
	return head[0], msg, nil
}

// A coalesced batch whose commit's answer is lost between PgBouncer and Postgres: the
// statement committed, and PgBouncer answers "08P01 server conn crashed?". That is no
// refusal: nothing says the statement did not commit, so the callers must not insert their
// jobs again on their own (which once inserted 39 of 40 jobs twice). The batch is sent
// again with its key, which finds the committed try and reads its rows back: every caller
// gets its job's id exactly once, and each job is in the table once.
func TestPgBouncer_CoalescedEnqueueWhoseCommitAnswerIsLostInsertsEachJobOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	direct := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	require.NoError(t, skiplock.Migrate(ctx, direct, skiplock.MigrateConfig{Schema: schema}))
	const faults = 3
	proxy := startCutProxy(t, pgtest.URL(t), "FROM unnest($1::text[], $2::text[], $3::text[], $4::smallint[]", faults)
	pb := pgbouncer.Start(t, proxy.url(), pgbouncer.Options{PoolMode: "transaction", PoolSize: 10})
	pool := bouncerPool(t, pb, 50)
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema, Logger: testLogger()})
	require.NoError(t, err)

	const callers = 40
	rows := make([]*skiplock.JobRow, callers)
	errs := make([]error, callers)
	together(callers, func(i int) { rows[i], errs[i] = client.Enqueue(ctx, bouncerArgs{N: i}, nil) })
	require.Positive(t, proxy.cuts.Load(), "the proxy cut no batch's answer")

	// Every job once in the table, under the id its caller got.
	got := map[int][]int64{}
	r, err := direct.Query(ctx, fmt.Sprintf(`SELECT (payload->>'n')::int, id FROM %q.jobs`, schema))
	require.NoError(t, err)
	for r.Next() {
		var n int
		var id int64
		require.NoError(t, r.Scan(&n, &id))
		got[n] = append(got[n], id)
	}
	require.NoError(t, r.Err())
	directClient, err := skiplock.NewClient(direct, skiplock.Config{Schema: schema, Logger: testLogger()})
	require.NoError(t, err)
	for i := range callers {
		if !assert.NoError(t, errs[i], "caller %d", i) {
			continue
		}
		assert.Equal(t, []int64{rows[i].ID}, got[i], "caller %d: its job's rows", i)
		stored, err := directClient.Get(ctx, rows[i].ID)
		require.NoError(t, err)
		assert.JSONEq(t, string(stored.Payload), string(rows[i].Payload), "caller %d", i)
		assert.True(t, stored.CreatedAt.Equal(rows[i].CreatedAt), "caller %d: created_at %s returned, %s stored", i, rows[i].CreatedAt, stored.CreatedAt)
		assert.True(t, stored.RunAt.Equal(rows[i].RunAt), "caller %d: run_at", i)
		assert.Equal(t, skiplock.StatusQueued, rows[i].Status, "caller %d", i)
	}
	assert.Len(t, got, callers, "jobs in the table")
	// The retries of the batch were cut too, until the proxy let one through.
	assert.EqualValues(t, faults, proxy.cuts.Load(), "answers cut")
}

// A single Enqueue on an idle client — a batch of one job — whose commit's answer is lost
// between PgBouncer and Postgres: the insert committed, and PgBouncer answers "08P01
// server conn crashed?". The caller, which retries on an error as callers do, must get
// its job's id once and find the job in the table once. Before, a batch of one took the
// keyless single insert: the caller got the 08P01, and its retry inserted the job again.
func TestPgBouncer_ASingleEnqueueWhoseCommitAnswerIsLostInsertsItOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	direct := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	require.NoError(t, skiplock.Migrate(ctx, direct, skiplock.MigrateConfig{Schema: schema}))
	// The marker is in the single insert and in the coalesced one alike.
	proxy := startCutProxy(t, pgtest.URL(t), "jobs (queue, kind, payload, priority, ", 1)
	pb := pgbouncer.Start(t, proxy.url(), pgbouncer.Options{PoolMode: "transaction", PoolSize: 4})
	pool := bouncerPool(t, pb, 4)
	client, err := skiplock.NewClient(pool, skiplock.Config{Schema: schema, Logger: testLogger()})
	require.NoError(t, err)

	var (
		row   *skiplock.JobRow
		calls int
		errs  []error
	)
	for calls < 3 { // a caller that retries an enqueue that failed
		calls++
		if row, err = client.Enqueue(ctx, bouncerArgs{N: 41}, nil); err == nil {
			break
		}
		errs = append(errs, err)
	}
	require.NoError(t, err)
	require.EqualValues(t, 1, proxy.cuts.Load(), "the proxy cut the insert's answer")
	assert.Empty(t, errs, "the caller saw errors")

	var ids []int64
	rows, err := direct.Query(ctx, fmt.Sprintf(`SELECT id FROM %q.jobs WHERE kind = 'bouncer'`, schema))
	require.NoError(t, err)
	ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	assert.Equal(t, []int64{row.ID}, ids, "the job's rows (%d calls)", calls)
}
