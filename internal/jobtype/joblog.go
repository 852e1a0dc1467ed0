package jobtype

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"
	"unicode/utf8"
)

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
