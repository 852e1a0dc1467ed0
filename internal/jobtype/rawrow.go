// This file holds the claim's row decoding straight from the wire: RowReader.Read
// decodes a row of Columns (and the claim's int8 columns after them) from
// pgx.Rows.RawValues when the columns come in the types and formats pgx's default codecs
// give them, and through rows.Scan, as before, otherwise or for any value it does not
// take (a NULL where the destination takes none, an infinite or out-of-range time).

package jobtype

import (
	"encoding/binary"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// rawKind is the type of one column, as the raw decoding reads it.
type rawKind uint8

const (
	rawInt8  rawKind = iota // bigint, binary
	rawInt4                 // integer, binary
	rawInt2                 // smallint, binary
	rawText                 // text, either format (the bytes are the string)
	rawJSONB                // jsonb, text format
	rawTime                 // timestamptz, binary, no ScanLocation
)

// columnKinds are the kinds of Columns, in order.
var columnKinds = [...]rawKind{rawInt8, rawText, rawText, rawJSONB, rawText, rawInt2, rawTime, rawInt4,
	rawInt4, rawTime, rawText, rawText, rawJSONB, rawText, rawTime, rawTime, rawJSONB, rawJSONB, rawJSONB}

// rawState says whether a RowReader decodes its rows raw.
type rawState uint8

const (
	rawUnknown rawState = iota // not looked at yet: the first Read decides
	rawYes
	rawNo
)

// Read reads the current row of rows, a Columns query with extra columns after them,
// into j and extra, and completes j (Finish), exactly as rows.Scan(r.Dest(j, extra...)...)
// and Finish do; the extra destinations may be *int64 and *pgtype.Int8 of bigint columns.
// The first Read looks at the columns (types, formats, the codecs of rows.TypeMap): when
// they are those of pgx's default type map, the rows are decoded from their raw bytes,
// without pgx's scan plans, an interface call per column. A value the raw decoding does
// not take (a NULL where Scan refuses one, an infinite or out-of-range time) goes
// through rows.Scan, so that the row gets Scan's result or error. All rows given to one
// reader must come from the same rows.
func (r *RowReader) Read(rows pgx.Rows, j *JobRow, extra ...any) error {
	if r.raw == rawUnknown {
		r.raw = rawNo
		if rawFits(rows, extra) {
			r.raw = rawYes
		}
	}
	if r.raw != rawYes || !r.readRaw(rows.RawValues(), j, extra) {
		if err := rows.Scan(r.Dest(j, extra...)...); err != nil {
			return err
		}
	}
	r.Finish(j)
	return nil
}

// rawFits reports whether the columns of rows are Columns followed by bigint columns for
// extra, each in the type, format and codec that readRaw decodes as pgx's scan would.
func rawFits(rows pgx.Rows, extra []any) bool {
	m := rows.TypeMap()
	fds := rows.FieldDescriptions()
	if m == nil || len(fds) != len(columnKinds)+len(extra) {
		return false
	}
	for i, fd := range fds {
		k := rawInt8
		if i < len(columnKinds) {
			k = columnKinds[i]
		} else {
			switch extra[i-len(columnKinds)].(type) {
			case *int64, *pgtype.Int8:
			default:
				return false
			}
		}
		if !kindFits(m, k, fd.DataTypeOID, fd.Format) {
			return false
		}
	}
	return true
}

// kindFits reports whether a column of type oid in format is of kind k, decoded by the
// codec of pgx's default type map.
func kindFits(m *pgtype.Map, k rawKind, oid uint32, format int16) bool {
	t, ok := m.TypeForOID(oid)
	if !ok {
		return false
	}
	binaryFmt := format == pgtype.BinaryFormatCode
	switch k {
	case rawInt8:
		_, ok = t.Codec.(pgtype.Int8Codec)
		return ok && oid == pgtype.Int8OID && binaryFmt
	case rawInt4:
		_, ok = t.Codec.(pgtype.Int4Codec)
		return ok && oid == pgtype.Int4OID && binaryFmt
	case rawInt2:
		_, ok = t.Codec.(pgtype.Int2Codec)
		return ok && oid == pgtype.Int2OID && binaryFmt
	case rawText:
		_, ok = t.Codec.(pgtype.TextCodec)
		return ok && oid == pgtype.TextOID && (binaryFmt || format == pgtype.TextFormatCode)
	case rawJSONB:
		// A text-format value scans into []byte as a copy and into DriverBytes in place,
		// whatever the codec's Marshal and Unmarshal.
		_, ok = t.Codec.(*pgtype.JSONBCodec)
		return ok && oid == pgtype.JSONBOID && format == pgtype.TextFormatCode
	case rawTime:
		c, ok := t.Codec.(*pgtype.TimestamptzCodec)
		return ok && c.ScanLocation == nil && oid == pgtype.TimestamptzOID && binaryFmt
	}
	return false
}

// readRaw decodes the row v into j, r's destinations and extra, as Scan would; false
// when a value is one it leaves to Scan (j and r may then be partly written: Scan
// writes every destination again).
func (r *RowReader) readRaw(v [][]byte, j *JobRow, extra []any) bool {
	if len(v) != len(columnKinds)+len(extra) {
		return false
	}
	var ok1, ok2, ok3, ok4, ok5, ok6, ok7 bool
	j.ID, ok1 = int8Value(v[0])
	r.queue, r.kind = v[1], v[2]
	if v[3] == nil {
		j.Payload = nil
	} else {
		j.Payload = append(make([]byte, 0, len(v[3])), v[3]...)
	}
	r.status = v[4]
	j.Priority, ok2 = int2Value(v[5])
	j.RunAt, ok3 = timeValue(v[6])
	j.Attempts, ok4 = int4Value(v[7])
	j.MaxAttempts, ok5 = int4Value(v[8])
	r.lockedAt, ok6 = nullTimeValue(v[9])
	r.lockedBy, r.lastErr, r.errs, r.uniqueKey = v[10], v[11], v[12], v[13]
	j.CreatedAt, ok7 = timeValue(v[14])
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 || !ok7 {
		return false
	}
	var ok bool
	if r.finishedAt, ok = nullTimeValue(v[15]); !ok {
		return false
	}
	r.meta, r.progress, r.output = v[16], v[17], v[18]
	for i, d := range extra {
		src := v[len(columnKinds)+i]
		switch d := d.(type) {
		case *int64:
			if *d, ok = int8Value(src); !ok {
				return false
			}
		case *pgtype.Int8:
			if src == nil {
				*d = pgtype.Int8{}
				continue
			}
			n, ok := int8Value(src)
			if !ok {
				return false
			}
			*d = pgtype.Int8{Int64: n, Valid: true}
		default:
			return false
		}
	}
	return true
}

// int8Value is a binary bigint; false for NULL or a wrong length.
func int8Value(src []byte) (int64, bool) {
	if len(src) != 8 {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(src)), true
}

// int4Value is a binary integer as an int; false for NULL or a wrong length.
func int4Value(src []byte) (int, bool) {
	if len(src) != 4 {
		return 0, false
	}
	return int(int32(binary.BigEndian.Uint32(src))), true
}

// int2Value is a binary smallint as an int; false for NULL or a wrong length.
func int2Value(src []byte) (int, bool) {
	if len(src) != 2 {
		return 0, false
	}
	return int(int16(binary.BigEndian.Uint16(src))), true
}

// Microseconds from the Unix epoch to 2000-01-01, the epoch of PostgreSQL's binary
// timestamps, and the range of times pgx's timestamptz codec accepts.
const microsecFromUnixEpochToY2K = 946_684_800 * 1_000_000

var (
	minTimestamptz = time.Date(-4713, 11, 24, 0, 0, 0, 0, time.UTC)
	endTimestamptz = time.Date(294277, 1, 1, 0, 0, 0, 0, time.UTC)
)

// timeValue is a binary timestamptz as pgx's codec makes it (time.Unix: local time, no
// ScanLocation); false for NULL, a wrong length, an infinity or a time out of range.
func timeValue(src []byte) (time.Time, bool) {
	us, ok := int8Value(src)
	if !ok || us == 1<<63-1 || us == -1<<63 {
		return time.Time{}, false
	}
	t := time.Unix(microsecFromUnixEpochToY2K/1_000_000+us/1_000_000,
		(microsecFromUnixEpochToY2K%1_000_000*1_000)+(us%1_000_000*1_000))
	if t.Before(minTimestamptz) || !t.Before(endTimestamptz) {
		return time.Time{}, false
	}
	return t, true
}

// nullTimeValue is a binary timestamptz that may be NULL (not Valid).
func nullTimeValue(src []byte) (pgtype.Timestamptz, bool) {
	if src == nil {
		return pgtype.Timestamptz{}, true
	}
	t, ok := timeValue(src)
	return pgtype.Timestamptz{Time: t, Valid: ok}, ok
}
