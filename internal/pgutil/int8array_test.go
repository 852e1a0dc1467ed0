package pgutil_test

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/skiplock/skiplock/internal/pgtest"
	"github.com/skiplock/skiplock/internal/pgutil"
)

// int8ArrayEdges are arrays of bigint's edge values: its limits, zero, signs, every
// length of digits, one element and none, and NULL (nil).
var int8ArrayEdges = [][]int64{
	{math.MinInt64, math.MaxInt64, 0, -1, 1}, {math.MinInt64 + 1, math.MaxInt64 - 1},
	{9, 10, 99, 100, 999999999, 1000000000, -9, -10, 1 << 31, -1 << 31, 1 << 53},
	{7}, {}, nil,
}

// Int8ArrayText is the text pgx's own codec makes of the []int64 for bigint[], and pgx
// sends it, as a string parameter, byte for byte (text format); nil is NULL.
func TestInt8ArrayText_IsPgxsTextEncoding(t *testing.T) {
	t.Parallel()
	m := pgtype.NewMap()
	for _, vals := range int8ArrayEdges {
		want, err := m.Encode(pgtype.Int8ArrayOID, pgtype.TextFormatCode, vals, nil)
		if err != nil {
			t.Fatal(err)
		}
		arg := pgutil.Int8ArrayText(vals)
		if vals == nil {
			if arg != nil {
				t.Errorf("nil: got %#v, want nil (NULL)", arg)
			}
			continue
		}
		s, ok := arg.(string)
		if !ok {
			t.Fatalf("%v: got a %T, want a string (pgx sends it as it is)", vals, arg)
		}
		if s != string(want) {
			t.Errorf("%v: got %q, pgx encodes %q", vals, s, want)
		}
		sent, err := m.Encode(pgtype.Int8ArrayOID, pgtype.TextFormatCode, arg, nil)
		if err != nil || string(sent) != s {
			t.Errorf("%v: pgx sends %q (%v), want %q", vals, sent, err, s)
		}
		var back []int64
		if err := m.Scan(pgtype.Int8ArrayOID, pgtype.TextFormatCode, []byte(s), &back); err != nil || !slices.Equal(back, vals) {
			t.Errorf("%v: pgx reads %q back as %v (%v)", vals, s, back, err)
		}
	}
}

// The server reads an Int8ArrayText parameter as the bigint[] its ids make, in each
// protocol pgx has: a typed parameter ($1::bigint[]) and one whose type the server
// infers (= ANY($1)), as the success batches and the wake-up take their ids.
func TestInt8ArrayText_ServerReadsTheArray(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	modes := []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol}
	for _, vals := range int8ArrayEdges {
		for _, mode := range modes {
			var typed []int64
			var isNull bool
			if err := pool.QueryRow(ctx, `SELECT $1::bigint[], $1::bigint[] IS NULL`, mode, pgutil.Int8ArrayText(vals)).Scan(&typed, &isNull); err != nil {
				t.Fatalf("%v, mode %v: %v", vals, mode, err)
			}
			if isNull != (vals == nil) || !slices.Equal(typed, vals) {
				t.Errorf("%v, mode %v: the server read %v (NULL: %v)", vals, mode, typed, isNull)
			}
			var inferred []int64
			if err := pool.QueryRow(ctx, `SELECT coalesce(array_agg(i ORDER BY o), '{}') FROM unnest($2::bigint[]) WITH ORDINALITY AS u(i, o) WHERE i = ANY($1)`,
				mode, pgutil.Int8ArrayText(vals), vals).Scan(&inferred); err != nil {
				t.Fatalf("%v, mode %v: %v", vals, mode, err)
			}
			if !slices.Equal(inferred, vals) && !(vals == nil && len(inferred) == 0) {
				t.Errorf("%v, mode %v: = ANY read %v", vals, mode, inferred)
			}
		}
	}
}
