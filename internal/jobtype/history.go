package jobtype

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// decodeHistory decodes a job's error history (the errors column) into a slice of
// AttemptError, as json.Unmarshal does. The history is written by the worker as jsonb
// (ownership.AppendHistory): an array of flat objects whose values are plain strings and
// numbers, which a claim of a retried job reads every time. Those are read here without
// reflection; anything else (escapes in a string, a null, a nested value, a number that
// is not a plain integer) goes to json.Unmarshal, so the result is always json's.
func decodeHistory(b []byte) ([]AttemptError, error) {
	if out, ok := parseHistory(b); ok {
		return out, nil
	}
	var out []AttemptError
	err := json.Unmarshal(b, &out)
	return out, err
}

// historyScanner reads the plain form of a history; ok turns false at anything else.
type historyScanner struct {
	b  []byte
	i  int
	ok bool
}

func (s *historyScanner) space() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\n' || s.b[s.i] == '\t' || s.b[s.i] == '\r') {
		s.i++
	}
}

// take consumes c after spaces, and reports whether it was there.
func (s *historyScanner) take(c byte) bool {
	s.space()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// str reads a string without escapes and returns it quoted (its bytes in b).
func (s *historyScanner) str() []byte {
	s.space()
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		s.ok = false
		return nil
	}
	end := bytes.IndexByte(s.b[s.i+1:], '"')
	if end < 0 {
		s.ok = false
		return nil
	}
	q := s.b[s.i : s.i+end+2]
	for _, c := range q[1 : len(q)-1] {
		if c == '\\' || c < 0x20 || c >= 0x80 {
			s.ok = false // escapes, control bytes, non-ASCII: json's own rules apply
			return nil
		}
	}
	s.i += end + 2
	return q
}

// value reads a plain string or integer and returns it as written.
func (s *historyScanner) value() []byte {
	s.space()
	if s.i < len(s.b) && s.b[s.i] == '"' {
		return s.str()
	}
	start := s.i
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	digits := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	if s.i == digits || s.b[digits] == '0' && s.i > digits+1 {
		s.ok = false // no digit, or a leading zero (not JSON)
	}
	return s.b[start:s.i]
}

// parseHistory reads the plain form of a history; false when b is not in it.
func parseHistory(b []byte) ([]AttemptError, bool) {
	s := &historyScanner{b: b, ok: true}
	if !s.take('[') {
		return nil, false
	}
	out := []AttemptError{}
	if s.take(']') {
		s.space()
		return out, s.i == len(b)
	}
	for {
		e, ok := s.entry()
		if !ok {
			return nil, false
		}
		out = append(out, e)
		if s.take(']') {
			break
		}
		if !s.take(',') {
			return nil, false
		}
	}
	s.space()
	return out, s.i == len(b)
}

// entry reads one object of the history.
func (s *historyScanner) entry() (e AttemptError, ok bool) {
	if !s.take('{') {
		return e, false
	}
	if s.take('}') {
		return e, true
	}
	for {
		key := s.str()
		if !s.ok || !s.take(':') {
			return e, false
		}
		v := s.value()
		if !s.ok || !s.set(&e, string(key[1:len(key)-1]), v) {
			return e, false
		}
		if s.take('}') {
			return e, true
		}
		if !s.take(',') {
			return e, false
		}
	}
}

// set stores the value v of key in e, as json.Unmarshal would; false where it would do
// more than that (a key of another case, a value of the wrong kind).
func (s *historyScanner) set(e *AttemptError, key string, v []byte) bool {
	str := len(v) > 0 && v[0] == '"'
	switch key {
	case "attempt":
		n, err := strconv.Atoi(string(v))
		if str || err != nil {
			return false
		}
		e.Attempt = n
	case "at":
		return str && e.At.UnmarshalJSON(v) == nil
	case "error":
		if !str {
			return false
		}
		e.Error = string(v[1 : len(v)-1])
	default:
		// json matches keys without regard to case: a key that folds to a field's name is
		// left to it; any other key is ignored, as json ignores it.
		if bytes.EqualFold([]byte(key), []byte("attempt")) || bytes.EqualFold([]byte(key), []byte("at")) ||
			bytes.EqualFold([]byte(key), []byte("error")) {
			return false
		}
	}
	return true
}
