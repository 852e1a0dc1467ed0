package jobtype

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"
	"unicode/utf8"
)

// LogRecord is one record a handler logged through the logger of its context
// (skiplock.Logger), as kept for its job.
type LogRecord struct {
	JobID   int64
	Attempt int   // the attempt that logged it, from 1
	Fence   int64 // the attempt's claim token: (Fence, Seq) orders a job's records in time
	Seq     int   // the record's place in its attempt, from 1
	At      time.Time
	Level   slog.Level
	Message string
	// Attrs are the record's attributes (and the logger's, from With and WithGroup) as a
	// JSON object; nil when none.
	Attrs json.RawMessage
}

// The bounds of one attempt's records: past either, the records are dropped and one
// marker record (LogsTruncated) says how many.
const (
	MaxLogRecords = 1000      // records per attempt
	MaxLogBytes   = 64 * 1024 // bytes of messages and attributes per attempt
)

// LogsTruncated starts the message of the marker record that ends an attempt's records
// when some were dropped.
const LogsTruncated = "skiplock: log records dropped"

// logBuf is one attempt's records, kept in its State until the attempt ends.
type logBuf struct {
	recs    []LogRecord
	bytes   int
	dropped int
	// The latest record's time and attempt, for the marker.
	last    time.Time
	job     int64
	attempt int
	fence   int64
}

// AddLog keeps r, unless the attempt's bound is reached (then it is counted as dropped).
func (s *State) AddLog(r LogRecord) {
	n := len(r.Message) + len(r.Attrs)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.logs == nil {
		s.logs = &logBuf{}
	}
	b := s.logs
	b.last, b.job, b.attempt, b.fence = r.At, r.JobID, r.Attempt, r.Fence
	if len(b.recs) >= MaxLogRecords || b.bytes+n > MaxLogBytes {
		b.dropped++
		return
	}
	b.bytes += n
	b.recs = append(b.recs, r)
}

// TakeLogs returns the records kept so far, numbered, with a marker record at the end
// when some were dropped, and forgets them; nil when none (a nil State has none).
func (s *State) TakeLogs() []LogRecord {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	b := s.logs
	s.logs = nil
	s.mu.Unlock()
	if b == nil {
		return nil
	}
	out := b.recs
	if b.dropped > 0 {
		out = append(out, LogRecord{JobID: b.job, Attempt: b.attempt, Fence: b.fence, At: b.last, Level: slog.LevelWarn,
			Message: fmt.Sprintf("%s: %d more (the limit is %d records or %d KiB per attempt)", LogsTruncated, b.dropped, MaxLogRecords, MaxLogBytes/1024)})
	}
	for i := range out {
		out[i].Seq = i + 1
	}
	return out
}

// JobLogHandler is the slog.Handler of an attempt's logger: it keeps the records in the
// attempt's State. Attributes are stored as a JSON object (groups as nested objects).
type JobLogHandler struct {
	st     *State
	row    *JobRow
	attrs  []slog.Attr // from WithAttrs, within groups
	groups []string    // from WithGroup
}

// NewJobLogHandler returns the handler that keeps row's records in st.
func NewJobLogHandler(st *State, row *JobRow) *JobLogHandler {
	return &JobLogHandler{st: st, row: row}
}

// Enabled keeps every level from debug up.
func (h *JobLogHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelDebug }

// Handle keeps r.
func (h *JobLogHandler) Handle(_ context.Context, r slog.Record) error {
	rec := LogRecord{JobID: h.row.ID, Attempt: h.row.Attempts, Fence: h.row.Fence, At: r.Time, Level: r.Level,
		Message: validUTF8(r.Message)}
	if rec.At.IsZero() {
		rec.At = time.Now()
	}
	if len(h.attrs) > 0 || r.NumAttrs() > 0 {
		own := make([]slog.Attr, 0, r.NumAttrs())
		r.Attrs(func(a slog.Attr) bool { own = append(own, a); return true })
		obj := attrsObject(h.attrs)
		leaf := obj
		for _, g := range h.groups {
			sub, ok := leaf[g].(map[string]any)
			if !ok {
				sub = map[string]any{}
				leaf[g] = sub
			}
			leaf = sub
		}
		for k, v := range attrsObject(own) {
			leaf[k] = v
		}
		if len(obj) > 0 {
			if b, err := json.Marshal(obj); err == nil {
				rec.Attrs = b
			}
		}
	}
	h.st.AddLog(rec)
	return nil
}

// WithAttrs returns a handler whose records carry attrs (in the current group).
func (h *JobLogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = nestAttrs(h.attrs, h.groups, attrs)
	return &c
}

// WithGroup returns a handler whose later attributes are in group name.
func (h *JobLogHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.groups = append(h.groups[:len(h.groups):len(h.groups)], name)
	return &c
}

// nestAttrs returns base plus attrs placed under groups.
func nestAttrs(base []slog.Attr, groups []string, attrs []slog.Attr) []slog.Attr {
	out := append(base[:len(base):len(base)], attrs...)
	if len(groups) == 0 {
		return out
	}
	var g slog.Attr
	for i := len(groups) - 1; i >= 0; i-- {
		var inner []any
		if i == len(groups)-1 {
			for _, a := range attrs {
				inner = append(inner, a)
			}
		} else {
			inner = []any{g}
		}
		g = slog.Group(groups[i], inner...)
	}
	return append(base[:len(base):len(base)], g)
}

// attrsObject turns attrs into a JSON-ready object: groups become nested objects,
// values their resolved form (errors and Stringers as text).
func attrsObject(attrs []slog.Attr) map[string]any {
	obj := make(map[string]any, len(attrs))
	for _, a := range attrs {
		v := a.Value.Resolve()
		if v.Kind() == slog.KindGroup {
			sub := attrsObject(v.Group())
			if a.Key == "" { // an inline group
				for k, x := range sub {
					obj[k] = x
				}
				continue
			}
			if prev, ok := obj[a.Key].(map[string]any); ok {
				for k, x := range sub {
					prev[k] = x
				}
				continue
			}
			obj[a.Key] = sub
			continue
		}
		if a.Key == "" {
			continue
		}
		obj[a.Key] = attrValue(v)
	}
	return obj
}

// attrValue is v as a JSON value.
func attrValue(v slog.Value) any {
	switch v.Kind() {
	case slog.KindString:
		return validUTF8(v.String())
	case slog.KindInt64:
		return v.Int64()
	case slog.KindUint64:
		return v.Uint64()
	case slog.KindFloat64:
		return v.Float64()
	case slog.KindBool:
		return v.Bool()
	case slog.KindDuration:
		return v.Duration().String()
	case slog.KindTime:
		return v.Time().Format(time.RFC3339Nano)
	}
	switch x := v.Any().(type) {
	case error:
		return validUTF8(x.Error())
	case fmt.Stringer:
		return validUTF8(x.String())
	case json.Marshaler:
		return x
	}
	if b, err := json.Marshal(v.Any()); err == nil {
		return json.RawMessage(b)
	}
	return validUTF8(fmt.Sprint(v.Any()))
}

// validUTF8 makes s storable in a text column: no NUL bytes, valid UTF-8.
func validUTF8(s string) string {
	if utf8.ValidString(s) && !containsNUL(s) {
		return s
	}
	out := make([]rune, 0, len(s))
	for _, r := range s {
		if r != 0 {
			out = append(out, r)
		}
	}
	return string(out)
}

func containsNUL(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return true
		}
	}
	return false
}
