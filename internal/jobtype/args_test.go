package jobtype

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
)

// argsT is an args type with fields of every kind a decoder could share between jobs:
// strings, a raw message, bytes, a map, a slice, an interface, a pointer.
type argsT struct {
	S   string            `json:"s"`
	Raw json.RawMessage   `json:"raw"`
	B   []byte            `json:"b"`
	M   map[string]string `json:"m"`
	L   []int             `json:"l"`
	Any any               `json:"any"`
	P   *int              `json:"p"`
	N   int64             `json:"n"`
}

// DecodeArgs gives what json.Unmarshal gives, values and errors, payload after payload
// (each decode after the others, so reused decoders are exercised), whatever came
// before: a failure, trailing bytes, a top-level scalar.
func TestDecodeArgs_AsUnmarshal(t *testing.T) {
	payloads := []string{
		`{"s":"a","raw":{"x":[1,2]},"b":"AQI=","m":{"k":"v"},"l":[1,2,3],"any":{"z":1},"p":7,"n":9}`,
		`{}`, `null`, `{"n":1}   `, `  {"n":2}`, `{"n":3} {"n":4}`, `{"n":"x"}`, `{"n":`, ``, `[1]`,
		`{"s":"\u00e9\n","l":[],"m":{}}`, `{"n":18446744073709551616}`, `{"raw":null,"any":[1,"a"]}`,
		"{\"n\":5}\n", `{"n":6}x`, `{"n":7}`,
	}
	for round := range 3 {
		for _, p := range payloads {
			var got, want argsT
			errGot := DecodeArgs([]byte(p), &got)
			errWant := json.Unmarshal([]byte(p), &want)
			if fmt.Sprint(errGot) != fmt.Sprint(errWant) {
				t.Fatalf("round %d, %q: error %v, json.Unmarshal's %v", round, p, errGot, errWant)
			}
			if errWant == nil && !reflect.DeepEqual(got, want) {
				t.Fatalf("round %d, %q: decoded %+v, json.Unmarshal %+v", round, p, got, want)
			}
		}
	}
	var n int
	if err := DecodeArgs([]byte(`12`), &n); err != nil || n != 12 {
		t.Fatalf("a top-level number: %d, %v", n, err)
	}
}

// The values one decode made are the job's own: decoding the next payloads through the
// same decoders leaves them as they were.
func TestDecodeArgs_SharesNothingBetweenJobs(t *testing.T) {
	first := `{"s":"first","raw":{"x":"first"},"b":"Zmlyc3Q=","m":{"k":"first"},"l":[1],"any":"first"}`
	var kept argsT
	if err := DecodeArgs([]byte(first), &kept); err != nil {
		t.Fatal(err)
	}
	var want argsT
	if err := json.Unmarshal([]byte(first), &want); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		var next argsT
		p := fmt.Sprintf(`{"s":"other%[1]d","raw":{"x":"other%[1]d"},"b":"b3RoZXI=","m":{"k":"other%[1]d"},"l":[%[1]d],"any":"other%[1]d"}`, i)
		if err := DecodeArgs([]byte(p), &next); err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(kept, want) {
		t.Fatalf("the first job's args changed: %+v, want %+v", kept, want)
	}
}

// Decoding a small payload into a struct through a decoder allocates nothing of the
// decoder's own (DecodeArgs keeps the decoders in a sync.Pool, which the race detector
// empties at random: the decoder is measured on its own).
func TestDecodeArgs_ReusesTheDecoder(t *testing.T) {
	payload := []byte(`{"n": 12345}`)
	d := argsDecoders.New().(*argsDecoder)
	var v argsT
	allocs := testing.AllocsPerRun(100, func() {
		if reusable, err := d.decode(payload, &v); err != nil || !reusable {
			t.Fatalf("decode: %v, reusable %v", err, reusable)
		}
	})
	if allocs > 0 {
		t.Fatalf("%v allocations per decode, want 0 (json.Unmarshal makes 3)", allocs)
	}
}
