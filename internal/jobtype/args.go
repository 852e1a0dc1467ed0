package jobtype

import (
	"bytes"
	"encoding/json"
	"sync"
)

// argsDecoder is a json.Decoder kept for the next payload: decoding through it reuses
// its decoding state (the decoder, its scanner's stack, its error context), which
// json.Unmarshal makes anew for every call (three to four allocations for a small
// object). The values decoded never point into it: encoding/json copies strings, raw
// messages and bytes out of its input.
type argsDecoder struct {
	r     bytes.Reader
	dec   *json.Decoder
	total int64 // bytes given to dec so far: its InputOffset once it read them all
}

// argsDecoders holds the decoders not in use; one with a buffer past maxPooledArgs is
// not kept.
var argsDecoders = sync.Pool{New: func() any {
	d := new(argsDecoder)
	d.dec = json.NewDecoder(&d.r)
	return d
}}

// maxPooledArgs bounds the payload a pooled decoder has read (its buffer grows to it).
const maxPooledArgs = 64 << 10

// DecodeArgs decodes the JSON payload into v, as json.Unmarshal(payload, v) does: the
// same values, and on failure the same error (json.Unmarshal's own, from the same
// input). It reuses a decoder (argsDecoder), and so allocates only what v's values need.
// Safe for concurrent use.
func DecodeArgs(payload []byte, v any) error {
	d := argsDecoders.Get().(*argsDecoder)
	reusable, err := d.decode(payload, v)
	if reusable && len(payload) <= maxPooledArgs {
		argsDecoders.Put(d)
	}
	return err
}

// decode decodes payload into v as json.Unmarshal does, and reports whether d is as new
// for the next payload.
func (d *argsDecoder) decode(payload []byte, v any) (reusable bool, err error) {
	d.r.Reset(payload)
	d.total += int64(len(payload))
	err = d.dec.Decode(v)
	if err == nil && d.dec.InputOffset() == d.total && d.r.Len() == 0 {
		// The decoder read one value, all of payload, and holds nothing back.
		return true, nil
	}
	// A failure, or bytes after the value (spaces, or more that json.Unmarshal refuses):
	// the decoder is left as it is (a failed one keeps its error), and json.Unmarshal
	// gives the verdict and its error. Where the decoder failed, v was not handed to
	// anyone; where it read the value, json.Unmarshal reads the same one again.
	if err == nil && len(bytes.TrimLeft(payload[len(payload)-int(d.total-d.dec.InputOffset()):], " \t\r\n")) == 0 {
		return false, nil // only spaces after the value, as json.Unmarshal allows
	}
	return false, json.Unmarshal(payload, v)
}
