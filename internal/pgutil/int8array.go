// This file holds Int8ArrayText: a []int64 as a bigint[] parameter that pgx sends with no
// work per element.

package pgutil

import "strconv"

// Int8ArrayText returns a as a bigint[] parameter in the array's text form ({1,2,3}),
// as a string, or nil (NULL) for a nil a; the elements are never NULL. pgx sends a
// string parameter as it is, in the text format, whatever the parameter's type: no work
// per element in the driver. A []int64 (or an array type of pgx's) goes through pgx's
// binary array codec instead: per element an interface value (boxed past 255), a plan
// lookup and an encode call, about 0.1 µs per element in the drain's profile, three
// elements per job in a success batch (ids and fences, and the ids again for the
// wake-up). The server reads the text as it reads any bigint[] literal. Build it once
// for the statements of a pipeline that take the same ids.
//
// The exec and simple protocols (PgBouncer setups), where the parameter's type is not
// known to pgx, send the same text, which the server reads as the bigint[] it is cast to
// or compared with, as it would a []int64's.
func Int8ArrayText(a []int64) any {
	if a == nil {
		return nil
	}
	b := make([]byte, 0, 2+len(a)*8)
	b = append(b, '{')
	for i, v := range a {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, v, 10)
	}
	return string(append(b, '}'))
}
