// This file holds Int8Array: a []int64 that pgx encodes as a bigint[] parameter without
// boxing each element.

package pgutil

import (
	"database/sql/driver"
	"strconv"

	"github.com/jackc/pgx/v5/pgtype"
)

// Int8Array is a []int64 passed as a bigint[] parameter. pgx encodes a plain []int64
// through pgtype.FlatArray, whose Index returns each element as an interface value: one
// allocation per element past 255 (a job id, in every success and failure batch).
// Int8Array's Index returns a pointer into the slice instead, which an interface holds
// without allocating, and pgx encodes it through pgtype.Int64Valuer, as it would the
// int64. nil encodes NULL, as a nil []int64 does; the elements are never NULL.
//
// Where the parameter's type is not known to pgx (the exec and simple protocols, which
// PgBouncer setups use), pgx sends it as its Value, the text []int64 would be sent as.
type Int8Array []int64

// Dimensions implements pgtype.ArrayGetter: one dimension, lower bound 1.
func (a Int8Array) Dimensions() []pgtype.ArrayDimension {
	if a == nil {
		return nil
	}
	return []pgtype.ArrayDimension{{Length: int32(len(a)), LowerBound: 1}}
}

// Index implements pgtype.ArrayGetter: element i, as a pointer into a.
func (a Int8Array) Index(i int) any { return (*int8Elem)(&a[i]) }

// IndexType implements pgtype.ArrayGetter.
func (a Int8Array) IndexType() any { return (*int8Elem)(nil) }

// int8Elem is one element of an Int8Array, encoded through its pointer.
type int8Elem int64

// Int64Value implements pgtype.Int64Valuer.
func (e *int8Elem) Int64Value() (pgtype.Int8, error) {
	return pgtype.Int8{Int64: int64(*e), Valid: true}, nil
}

// Value implements driver.Value: the array as text ({1,2,3}), for a parameter whose type
// pgx does not know; pgx encodes a []int64 there as the same text.
func (a Int8Array) Value() (driver.Value, error) {
	if a == nil {
		return nil, nil
	}
	b := make([]byte, 0, 2+len(a)*8)
	b = append(b, '{')
	for i, v := range a {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, v, 10)
	}
	return string(append(b, '}')), nil
}
