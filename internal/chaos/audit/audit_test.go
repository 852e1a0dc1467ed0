package audit_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/chaos/audit"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// An execution's start insert can reach the server after the worker gave up on it and
// marked the execution aborted (a black-holed connection forwards it late). Whichever
// of the two lands first, the row must end up aborted: otherwise the harness sees an
// execution with no end, and takes it for work lasting until the worker exited.
func TestAudit_AbortHoldsWhicheverStatementLandsFirst(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := pgtest.Pool(t)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // nothing of it is kept
	_, err = tx.Exec(ctx, audit.CreateSQL)
	require.NoError(t, err)

	start := time.Date(2026, 12, 1, 18, 52, 13, 553818000, time.UTC)
	args := func(id string) []any { return []any{id, int64(6996), int64(6995), 1, "w1", 42, start, nil} }

	// The abort first, then the late start insert.
	_, err = tx.Exec(ctx, audit.AbortSQL, args("late-start")...)
	require.NoError(t, err)
	tag, err := tx.Exec(ctx, audit.StartSQL, args("late-start")...)
	require.NoError(t, err)
	assert.Zero(t, tag.RowsAffected(), "the late start insert must not write")

	// The start first (it committed, its reply was lost), then the abort.
	_, err = tx.Exec(ctx, audit.StartSQL, args("lost-reply")...)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, audit.AbortSQL, args("lost-reply")...)
	require.NoError(t, err)

	for _, id := range []string{"late-start", "lost-reply"} {
		var aborted bool
		var started, ended *time.Time
		require.NoError(t, tx.QueryRow(ctx, `SELECT aborted, started_at, ended_at FROM chaos.executions WHERE exec_id = $1`, id).
			Scan(&aborted, &started, &ended))
		assert.True(t, aborted, id)
		require.NotNil(t, ended, id)
		assert.True(t, started.Equal(*ended), "%s: an aborted execution ends when it starts", id)
	}
}

// A worker's ends file gives back each execution's end as the table would keep it, and a
// last line cut short by a kill is left out instead of failing the run's analysis.
func TestAudit_EndsFileRoundTripsAndSkipsATornLastLine(t *testing.T) {
	end := time.Date(2026, 12, 2, 5, 5, 10, 123456789, time.FixedZone("x", 3600))
	file := audit.EndLine("w1-g1-7", end) + audit.EndLine("w1-g1-8", end.Add(time.Millisecond)) + "w1-g1-9\t2026-12-02T0"
	ends, err := audit.ReadEnds(strings.NewReader(file))
	require.NoError(t, err)
	require.Len(t, ends, 2)
	assert.True(t, ends["w1-g1-7"].Equal(end.Truncate(time.Microsecond)), "microseconds, like timestamptz: %v", ends["w1-g1-7"])
	assert.True(t, ends["w1-g1-8"].Equal(end.Add(time.Millisecond).Truncate(time.Microsecond)))

	_, err = audit.ReadEnds(strings.NewReader("no tab here\n"))
	assert.ErrorContains(t, err, "no tab")
}
