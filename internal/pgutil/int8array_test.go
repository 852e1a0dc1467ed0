package pgutil_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/skiplock/skiplock/internal/pgutil"
)

// Int8Array encodes exactly as the []int64 it holds, in every format and protocol pgx
// uses: bigint[] in binary and text (the extended protocol), and the unknown type of
// the exec and simple protocols (OID 0, text); nil encodes NULL.
func TestInt8Array_EncodesAsInt64Slice(t *testing.T) {
	t.Parallel()
	m := pgtype.NewMap()
	for _, vals := range [][]int64{{1, 300, -5, 1 << 62}, {}, {7}, nil} {
		for _, oid := range []uint32{0, pgtype.Int8ArrayOID} {
			for _, f := range []int16{pgtype.TextFormatCode, pgtype.BinaryFormatCode} {
				want, wantErr := m.Encode(oid, f, vals, nil)
				got, err := m.Encode(oid, f, pgutil.Int8Array(vals), nil)
				if oid == 0 && f == pgtype.BinaryFormatCode {
					continue // pgx sends a parameter of unknown type as text
				}
				if wantErr != nil || err != nil {
					t.Fatalf("%v, oid %d, format %d: errors %v / %v", vals, oid, f, wantErr, err)
				}
				if string(got) != string(want) || (got == nil) != (want == nil) {
					t.Errorf("%v, oid %d, format %d: encoded %q, []int64 encodes %q", vals, oid, f, got, want)
				}
			}
		}
	}
}

// Encoding an Int8Array allocates nothing per element.
func TestInt8Array_EncodesWithoutBoxing(t *testing.T) {
	m := pgtype.NewMap()
	vals := make([]int64, 100)
	for i := range vals {
		vals[i] = int64(1000 + i)
	}
	buf := make([]byte, 0, 4096)
	arr := pgutil.Int8Array(vals)
	var arg any = arr
	allocs := testing.AllocsPerRun(50, func() {
		if _, err := m.Encode(pgtype.Int8ArrayOID, pgtype.BinaryFormatCode, arg, buf[:0]); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 2 {
		t.Fatalf("encoding 100 elements took %v allocations, want at most 2 (the dimensions)", allocs)
	}
}
