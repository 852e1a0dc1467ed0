package enqueue

import (
	"bytes"
	"errors"
	"testing"
)

// A payload whose sealed form is larger than jsonb holds (a string past 2^28 - 1 bytes)
// is refused by Seal with ErrPayloadTooLarge, with no limit of the caller's
// (MaxPayloadBytes negative): the args fit, their encryption, a third larger, would not,
// and the server's refusal would abort the caller's transaction. A sealed form that fits
// is kept.
func TestSeal_ASealedFormLargerThanJSONBHoldsIsRefused(t *testing.T) {
	t.Parallel()
	huge := func(string, []byte) ([]byte, error) {
		b := make([]byte, 0, 1<<28+2)
		b = append(b, '"')
		b = append(b, bytes.Repeat([]byte("A"), 1<<28)...)
		return append(b, '"'), nil
	}
	j := Job{Kind: "k", Payload: []byte(`{}`), Sealer: huge}
	if err := j.Seal(-1); !errors.Is(err, ErrPayloadTooLarge) {
		t.Fatalf("Seal of a sealed form past jsonb's string limit: %v, want ErrPayloadTooLarge", err)
	}
	small := Job{Kind: "k", Payload: []byte(`{}`), Sealer: func(string, []byte) ([]byte, error) { return []byte(`"sealed"`), nil }}
	if err := small.Seal(-1); err != nil || string(small.Payload) != `"sealed"` {
		t.Fatalf("Seal of a small sealed form: %v, payload %s", err, small.Payload)
	}
}
