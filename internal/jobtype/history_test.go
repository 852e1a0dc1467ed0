package jobtype

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
)

// decodeHistory gives what json.Unmarshal gives, on histories in the plain form the
// worker writes and on every other form it must leave to json.
func TestDecodeHistory_AsJSON(t *testing.T) {
	for _, in := range []string{
		`[]`, ` [ ] `, `[{}]`,
		`[{"at": "2026-12-06T10:48:07.123456+00:00", "error": "boom", "worker": "w-1", "attempt": 1}]`,
		`[{"at": "2026-12-06T10:48:07Z", "error": "a", "attempt": 1}, {"at": "2026-12-06T10:49:07.5+01:00", "error": "", "attempt": 2}]`,
		`[{"attempt":3,"error":"x","at":"2026-01-02T03:04:05Z","extra":12}]`,
		`[{"attempt": 1, "attempt": 2}]`,
		`[{"error": "line\nbreak \"quoted\" \u00e9"}]`, `[{"error": "é"}]`,
		`[{"Attempt": 4}]`, `[{"ERROR": "up"}]`, `[{"AT": "2026-01-02T03:04:05Z"}]`,
		`[{"attempt": "1"}]`, `[{"attempt": 1.5}]`, `[{"attempt": 1e2}]`, `[{"attempt": 01}]`, `[{"attempt": -0}]`,
		`[{"attempt": -3}]`, `[{"attempt": 99999999999999999999}]`,
		`[{"at": "yesterday"}]`, `[{"at": 5}]`, `[{"error": null}]`, `[{"worker": null}]`, `[{"worker": {"a": 1}}]`,
		`[{"worker": true}]`, `null`, `{}`, `[1]`, `[{"a": "b"}] x`, `[{"a": "b"},]`, `[{"a" "b"}]`, `[`, `[{`,
		`[{"error": "tab	inside"}]`, "[{\"error\": \"bad \xff byte\"}]",
	} {
		var want []AttemptError
		werr := json.Unmarshal([]byte(in), &want)
		got, gerr := decodeHistory([]byte(in))
		assert.Equal(t, werr != nil, gerr != nil, "%s: error %v, json's %v", in, gerr, werr)
		if werr == nil {
			assert.Equal(t, want, got, in)
		}
	}
}

// The plain form the worker writes is read without json (parseHistory).
func TestDecodeHistory_PlainFormWithoutJSON(t *testing.T) {
	_, ok := parseHistory([]byte(`[{"at": "2026-12-06T10:48:07.123456+00:00", "error": "boom", "worker": "w-1", "attempt": 1}]`))
	assert.True(t, ok)
}
