package record

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/jobtype"
)

// perJobValues writes the JSON json.Marshal makes of the batch's map of "id:fence" to
// [verdict, delay µs, message]: the same object once decoded, whatever the messages
// hold (quotes, backslashes, control characters, HTML characters, line separators,
// invalid UTF-8), with the later entry of a key that comes twice, and valid JSON for an
// empty batch.
func TestPerJobValues_IsTheMapJSONMarshalWrites(t *testing.T) {
	t.Parallel()
	msgs := []string{"", "plain", `a "quoted" \\ back\slash`, "tab\tnew\nline\r\x00\x1f\x7f", "<script>&amp;</script>",
		"line\u2028sep\u2029", "bad \xff\xfe utf-8 \xc3", "ünïcödé 日本 😀", `{"json": [1]}`}
	var batch []*failedAttempt
	for i, m := range msgs {
		batch = append(batch, &failedAttempt{key: jobtype.AttemptKey{ID: int64(i + 1), Fence: int64(1000 + i)},
			verdict: []string{verdictRetry, verdictSnooze, verdictDeadline, "failed", "cancelled"}[i%5],
			delay:   []time.Duration{0, time.Microsecond, -time.Second, math.MaxInt64, 1500 * time.Nanosecond}[i%5], msg: m})
	}
	batch = append(batch,
		&failedAttempt{key: jobtype.AttemptKey{ID: math.MaxInt64, Fence: math.MinInt64}, verdict: verdictRetry, msg: "edges"},
		&failedAttempt{key: jobtype.AttemptKey{ID: 1, Fence: 1000}, verdict: "failed", delay: time.Hour, msg: "the same key again"})
	for _, b := range [][]*failedAttempt{batch, batch[:1], nil} {
		values := map[string][3]any{}
		for _, a := range b {
			values[strconv.FormatInt(a.key.ID, 10)+":"+strconv.FormatInt(a.key.Fence, 10)] = [3]any{a.verdict, a.delay.Microseconds(), a.msg}
		}
		want, err := json.Marshal(values)
		if err != nil {
			t.Fatal(err)
		}
		got := perJobValues(b)
		g, err := decodeExact(got)
		if err != nil {
			t.Fatalf("%d attempts: %s is not JSON: %v", len(b), got, err)
		}
		w, err := decodeExact(want)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("%d attempts:\n got %s\nwant %s", len(b), got, want)
		}
	}
}

// decodeExact decodes a JSON object of arrays, its numbers as written (json.Number).
func decodeExact(b []byte) (map[string][3]any, error) {
	var m map[string][3]any
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		return nil, err
	}
	if d.More() {
		return nil, errors.New("more after the object")
	}
	return m, nil
}
