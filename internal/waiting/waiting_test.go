package waiting

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/stretchr/testify/require"
)

// listening connects to the test database and listens on channel.
func listening(t *testing.T, channel string) *pgx.Conn {
	t.Helper()
	conn := pgtest.Connect(t, pgtest.URL(t))
	_, err := conn.Exec(context.Background(), "LISTEN "+pgx.Identifier{channel}.Sanitize())
	require.NoError(t, err)
	return conn
}

// awaitAsync runs w.await on conn in a goroutine the test waits for, and returns how long
// it took and its error on the channel.
type awaited struct {
	took time.Duration
	err  error
}

func awaitAsync(t *testing.T, ctx context.Context, w *Waiter, conn *pgx.Conn, ids map[int64]bool) <-chan awaited {
	t.Helper()
	out := make(chan awaited, 1)
	start := time.Now()
	go func() {
		err := w.await(ctx, conn, ids, time.Time{})
		out <- awaited{took: time.Since(start), err: err}
	}()
	return out
}

// within fails the test when nothing comes on ch in d.
func within(t *testing.T, ch <-chan awaited, d time.Duration) awaited {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(d):
		t.Fatalf("await did not return in %v", d)
		return awaited{}
	}
}

// The poll ends the wait even when the connection's read deadline is cleared while the
// wait reads (as a context watcher of the connection does after a cancelled call): a
// timer sets it again when the poll is due.
func TestAwait_PollEndsAReadWhoseDeadlineWasCleared(t *testing.T) {
	conn := listening(t, "skiplock_waiting_test_a")
	w := &Waiter{Poll: 500 * time.Millisecond}
	ch := awaitAsync(t, context.Background(), w, conn, map[int64]bool{1: true})
	time.Sleep(150 * time.Millisecond) // await has set its deadline and reads
	require.NoError(t, conn.PgConn().Conn().SetReadDeadline(time.Time{}))
	a := within(t, ch, 10*time.Second)
	require.NoError(t, a.err)
	require.GreaterOrEqual(t, a.took, 450*time.Millisecond)

	// The connection is the same and works: a poll does not close it.
	pid := conn.PgConn().PID()
	var one int
	require.NoError(t, conn.QueryRow(context.Background(), "SELECT 1").Scan(&one))
	require.Equal(t, pid, conn.PgConn().PID())
	require.False(t, conn.IsClosed())
}

// A notification about an awaited id ends the wait at once; one about another id does not.
func TestAwait_ReturnsOnANotificationAboutAnAwaitedID(t *testing.T) {
	const channel = "skiplock_waiting_test_b"
	conn := listening(t, channel)
	other := listening(t, "skiplock_waiting_test_other")
	w := &Waiter{Poll: time.Minute}
	ch := awaitAsync(t, context.Background(), w, conn, map[int64]bool{7: true})
	_, err := other.Exec(context.Background(), "SELECT pg_notify($1, '8'), pg_notify($1, 'x')", channel)
	require.NoError(t, err)
	select {
	case a := <-ch:
		t.Fatalf("await returned on a notification about another id: %+v", a)
	case <-time.After(300 * time.Millisecond):
	}
	_, err = other.Exec(context.Background(), "SELECT pg_notify($1, '7')", channel)
	require.NoError(t, err)
	a := within(t, ch, 10*time.Second)
	require.NoError(t, a.err)
	require.Less(t, a.took, 30*time.Second)
}

// A context that ends ends the wait with its error, and leaves the connection open.
func TestAwait_ContextEndsTheWait(t *testing.T) {
	conn := listening(t, "skiplock_waiting_test_c")
	w := &Waiter{Poll: time.Minute}
	ctx, cancel := context.WithCancel(context.Background())
	ch := awaitAsync(t, ctx, w, conn, map[int64]bool{1: true})
	time.Sleep(100 * time.Millisecond)
	cancel()
	a := within(t, ch, 10*time.Second)
	require.ErrorIs(t, a.err, context.Canceled)
	require.False(t, conn.IsClosed())

	// A context already ended when the wait begins ends it too.
	a = within(t, awaitAsync(t, ctx, w, conn, map[int64]bool{1: true}), 10*time.Second)
	require.ErrorIs(t, a.err, context.Canceled)
	var one int
	require.NoError(t, conn.QueryRow(context.Background(), "SELECT 1").Scan(&one))
}
