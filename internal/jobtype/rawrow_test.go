package jobtype

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/stretchr/testify/require"
)

// rawRowsSQL returns rows of Columns, fence and timeout_ms, in the claim's types, with
// the values the raw decoding must read as Scan does and those it must leave to Scan:
// NULLs, infinities, times before 1970 and 2000 and far ahead, extreme numbers, text
// and JSON of every shape the columns hold.
const rawRowsSQL = `SELECT id::bigint, queue::text, kind::text, payload::jsonb, status::text,
	priority::smallint, run_at::timestamptz, attempts::integer, max_attempts::integer,
	locked_at::timestamptz, locked_by::text, last_error::text, errors::jsonb, unique_key::text,
	created_at::timestamptz, finished_at::timestamptz, metadata::jsonb, progress::jsonb,
	output::jsonb, fence::bigint, timeout_ms::bigint
FROM (VALUES
	(1, 'default', 'email', '{"to": "a@b.c", "n": [1, 2.5, null]}', 'running', 0,
	 '2026-12-06 15:00:00.123456+00', 1, 25, '2026-12-06 15:00:01.5+00', 'worker-1', NULL, NULL, NULL,
	 '2026-12-06 14:59:59.999999+00', NULL, '{}', NULL, NULL, 7, NULL),
	(9223372036854775807, 'q-é✓', 'kind', '{}', 'running', -32768,
	 '1969-12-31 23:59:59.999999+00', 2147483647, 2147483647, '1999-12-31 23:59:59.000001+00', '', 'boom', '[{"attempt": 1, "at": "2026-01-02T03:04:05.000006Z", "error": "x"}]', 'uniq',
	 '0001-01-01 00:00:00+00', '294276-12-31 23:59:59.999999+00', '{"skiplock_deadline": "2027-01-01T00:00:00.5Z", "k": "v"}', '{"value": 42.5, "message": "half"}', '{"ok": true}', -9223372036854775808, 86400000),
	(-1, '', 'k', 'null', 'queued', 32767,
	 '4713-11-24 00:00:00+00 BC', -2147483648, 1, 'infinity', NULL, '', '[]', '',
	 '2000-01-01 00:00:00+00', '-infinity', '{"a": 1}', 'null', '[]', 0, 1),
	(3, 'default', 'k', '{}', 'running', 5,
	 '2026-12-06 15:00:00+00', 1, 3, NULL, 'w', NULL, '"not a history"', NULL,
	 '2026-12-06 15:00:00+00', NULL, '{}', '{"value": "not a number"}', NULL, 1, NULL)
) AS v(id, queue, kind, payload, status, priority, run_at, attempts, max_attempts, locked_at,
	locked_by, last_error, errors, unique_key, created_at, finished_at, metadata, progress, output,
	fence, timeout_ms)`

// claimedRow is what one row of rawRowsSQL reads into.
type claimedRow struct {
	Job     *JobRow
	Fence   int64
	Timeout pgtype.Int8
}

// readAll reads the rows of sql with a RowReader, through Read (raw) or through Scan and
// Finish, and returns them, the error that ended the read, and the reader.
func readAll(t *testing.T, conn *pgx.Conn, sql string, raw bool, args ...any) ([]claimedRow, error, *RowReader) {
	t.Helper()
	rows, err := conn.Query(context.Background(), sql, args...)
	require.NoError(t, err)
	defer rows.Close()
	var (
		r   RowReader
		out []claimedRow
	)
	for rows.Next() {
		var c claimedRow
		c.Job = new(JobRow)
		if raw {
			err = r.Read(rows, c.Job, &c.Fence, &c.Timeout)
		} else if err = rows.Scan(r.Dest(c.Job, &c.Fence, &c.Timeout)...); err == nil {
			r.Finish(c.Job)
		}
		if err != nil {
			return out, err, &r
		}
		out = append(out, c)
	}
	return out, rows.Err(), &r
}

// RowReader.Read reads every row as Scan and Finish do: decoded raw with pgx's default
// type map, through Scan when the columns come in another format (the simple protocol)
// or with another codec (a timestamptz ScanLocation), and with Scan's error for a value
// Scan refuses.
func TestRowReader_ReadMatchesScan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.URL(t))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	utc, err := pgx.Connect(ctx, pgtest.URL(t))
	require.NoError(t, err)
	t.Cleanup(func() { utc.Close(context.Background()) })
	utc.TypeMap().RegisterType(&pgtype.Type{Name: "timestamptz", OID: pgtype.TimestamptzOID,
		Codec: &pgtype.TimestamptzCodec{ScanLocation: time.UTC}})

	for _, tc := range []struct {
		name string
		conn *pgx.Conn
		args []any
		raw  rawState
	}{
		{"default type map: raw", conn, nil, rawYes},
		{"simple protocol, text formats: Scan", conn, []any{pgx.QueryExecModeSimpleProtocol}, rawNo},
		{"timestamptz ScanLocation: Scan", utc, nil, rawNo},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, err, _ := readAll(t, tc.conn, rawRowsSQL, false, tc.args...)
			require.NoError(t, err)
			got, err, r := readAll(t, tc.conn, rawRowsSQL, true, tc.args...)
			require.NoError(t, err)
			require.Len(t, want, 4)
			require.Equal(t, want, got)
			require.Equal(t, tc.raw, r.raw)
		})
	}

	// Spot checks of what both read.
	got, err, _ := readAll(t, conn, rawRowsSQL, true)
	require.NoError(t, err)
	j := got[1].Job
	require.Equal(t, int64(1<<63-1), j.ID)
	require.Equal(t, "q-é✓", j.Queue)
	require.Equal(t, -32768, j.Priority)
	require.True(t, j.RunAt.Equal(time.Date(1969, 12, 31, 23, 59, 59, 999999000, time.UTC)), j.RunAt)
	require.Equal(t, time.Local, j.RunAt.Location())
	require.Equal(t, "2027-01-01T00:00:00.5Z", j.Deadline.UTC().Format(time.RFC3339Nano))
	require.Equal(t, &Progress{Value: 42.5, Message: "half"}, j.Progress)
	require.Len(t, j.Errors, 1)
	require.Equal(t, int64(-1<<63), got[1].Fence)
	require.Equal(t, pgtype.Int8{Int64: 86400000, Valid: true}, got[1].Timeout)
	require.True(t, got[2].Job.LockedAt.IsZero(), "infinity: a Valid time of zero value, as Scan makes it")
	require.Equal(t, []byte("null"), got[2].Job.Payload)

	// A value Scan refuses: the same error both ways.
	for _, bad := range []string{
		`SELECT * FROM (` + rawRowsSQL + `) r UNION ALL SELECT 5, 'q', 'k', '{}', 'running', 0::smallint, 'infinity', 1, 1, NULL, NULL, NULL, NULL, NULL, now(), NULL, '{}', NULL, NULL, 1, NULL`,
		`SELECT 5::bigint, 'q'::text, 'k'::text, '{}'::jsonb, 'running'::text, NULL::smallint, now(), 1, 1, NULL::timestamptz, NULL::text,
			NULL::text, NULL::jsonb, NULL::text, now(), NULL::timestamptz, '{}'::jsonb, NULL::jsonb, NULL::jsonb, 1::bigint, NULL::bigint`,
		`SELECT 5::bigint, 'q'::text, 'k'::text, '{}'::jsonb, 'running'::text, 0::smallint, now(), 1, 1, NULL::timestamptz, NULL::text,
			NULL::text, NULL::jsonb, NULL::text, now(), NULL::timestamptz, '{}'::jsonb, NULL::jsonb, NULL::jsonb, NULL::bigint, NULL::bigint`,
	} {
		want, wantErr, _ := readAll(t, conn, bad, false)
		got, gotErr, r := readAll(t, conn, bad, true)
		require.Error(t, wantErr)
		require.EqualError(t, gotErr, wantErr.Error())
		require.Equal(t, want, got)
		require.Equal(t, rawYes, r.raw, bad)
	}
}
