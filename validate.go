// This file holds the validation of what is enqueued: schema, queue and kind names,
// options, and payloads Postgres would refuse. Everything here runs before anything is
// written, so bad input costs the caller's transaction nothing.

package skiplock

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"
)

var schemaRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,47}$`)

// validSchema checks a schema name; names are also quoted wherever they are used.
func validSchema(s string) error {
	if !schemaRE.MatchString(s) {
		return fmt.Errorf("%w: %q: use [a-z_][a-z0-9_], 1-48 characters", ErrInvalidSchema, s)
	}
	return nil
}

// validQueue checks a queue name. It runs for every enqueued job, so it is a loop, not
// a regular expression (which cost 4% of a bulk insert's CPU).
func validQueue(q string) error {
	ok := len(q) >= 1 && len(q) <= MaxQueueLength
	for i := 0; ok && i < len(q); i++ {
		c := q[i]
		ok = c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-'
	}
	if !ok {
		return fmt.Errorf("%w: %q: use [a-z0-9_-], 1-64 characters", ErrInvalidQueue, q)
	}
	return nil
}

// newJob is a validated job ready to insert.
type newJob struct {
	queue       string
	kind        string
	payload     []byte
	priority    int16
	runAt       *time.Time // nil: now() by the database clock
	maxAttempts int32
	uniqueKey   *string
}

// dueNow reports whether the job may run at once (and so deserves a wake-up).
func (j *newJob) dueNow() bool { return j.runAt == nil || !j.runAt.After(time.Now()) }

// prepare validates args and options and marshals the payload. It writes nothing.
func (c *Client) prepare(args JobArgs, opts *EnqueueOptions) (newJob, error) {
	if args == nil {
		return newJob{}, ErrNilArgs
	}
	if v := reflect.ValueOf(args); v.Kind() == reflect.Pointer && v.IsNil() {
		return newJob{}, fmt.Errorf("%w: a nil %T", ErrNilArgs, args)
	}
	kind := args.Kind()
	if kind == "" || len(kind) > MaxKindLength || !validText(kind) {
		return newJob{}, fmt.Errorf("%w: %q (%T): a kind must be 1-%d bytes of UTF-8 without NUL", ErrInvalidKind, truncate(kind, 40), args, MaxKindLength)
	}
	var o EnqueueOptions
	if d, ok := args.(JobArgsWithOptions); ok {
		o = d.EnqueueOptions()
	}
	if opts != nil {
		o = mergeOptions(o, *opts)
	}
	if o.Queue == "" {
		o.Queue = DefaultQueue
	}
	if err := validQueue(o.Queue); err != nil {
		return newJob{}, err
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.MaxAttempts < 1 {
		return newJob{}, fmt.Errorf("%w: MaxAttempts %d: must be at least 1", ErrInvalidOptions, o.MaxAttempts)
	}
	if o.MaxAttempts > 1_000_000 {
		return newJob{}, fmt.Errorf("%w: MaxAttempts %d: must be at most 1000000", ErrInvalidOptions, o.MaxAttempts)
	}
	if o.Priority < MinPriority || o.Priority > MaxPriority {
		return newJob{}, fmt.Errorf("%w: Priority %d: must be in [%d, %d]", ErrInvalidOptions, o.Priority, MinPriority, MaxPriority)
	}
	if len(o.UniqueKey) > 255 || !validText(o.UniqueKey) {
		return newJob{}, fmt.Errorf("%w: UniqueKey %q: at most 255 bytes of UTF-8 without NUL", ErrInvalidOptions, truncate(o.UniqueKey, 40))
	}
	if !o.RunAt.IsZero() && (o.RunAt.Year() < 1 || o.RunAt.Year() > 9999) {
		return newJob{}, fmt.Errorf("%w: RunAt %s: the year must be in [1, 9999]", ErrInvalidOptions, o.RunAt.Format(time.RFC3339))
	}
	payload, err := json.Marshal(args)
	if err != nil {
		return newJob{}, fmt.Errorf("%w: kind %q: %v", ErrInvalidPayload, kind, err)
	}
	if err := checkJSONB(payload); err != nil {
		return newJob{}, fmt.Errorf("%w: kind %q: %v", ErrInvalidPayload, kind, err)
	}
	if c.maxBytes > 0 && len(payload) > c.maxBytes {
		return newJob{}, fmt.Errorf("%w: kind %q: %d bytes, the limit is %d (Config.MaxPayloadBytes)", ErrPayloadTooLarge, kind, len(payload), c.maxBytes)
	}
	j := newJob{queue: o.Queue, kind: kind, payload: payload, priority: int16(o.Priority), maxAttempts: int32(o.MaxAttempts)}
	if !o.RunAt.IsZero() {
		t := o.RunAt
		j.runAt = &t
	}
	if o.UniqueKey != "" {
		k := o.UniqueKey
		j.uniqueKey = &k
	}
	return j, nil
}

func mergeOptions(base, over EnqueueOptions) EnqueueOptions {
	if over.Queue != "" {
		base.Queue = over.Queue
	}
	if over.Priority != 0 {
		base.Priority = over.Priority
	}
	if !over.RunAt.IsZero() {
		base.RunAt = over.RunAt
	}
	if over.MaxAttempts != 0 {
		base.MaxAttempts = over.MaxAttempts
	}
	if over.UniqueKey != "" {
		base.UniqueKey = over.UniqueKey
	}
	return base
}

// checkJSONB rejects valid JSON that Postgres's jsonb would still refuse, so that the
// error comes before anything is sent (a refused statement would abort the caller's
// transaction): invalid UTF-8, the escape \u0000, and numbers beyond numeric's range
// (which only custom marshalers and json.RawMessage can produce). One pass, no allocation.
func checkJSONB(b []byte) error {
	if !utf8.Valid(b) {
		return errors.New("not valid UTF-8")
	}
	inString := false
	digits, expDigits, exp := 0, 0, 0
	inExp := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inString {
			switch c {
			case '\\':
				if i+5 < len(b) && b[i+1] == 'u' && string(b[i+2:i+6]) == "0000" {
					return errors.New(`contains \u0000, which Postgres cannot store in jsonb`)
				}
				i++ // skip the escaped character
			case '"':
				inString = false
			}
			continue
		}
		switch {
		case c == '"':
			inString = true
			digits, inExp = 0, false
		case c >= '0' && c <= '9':
			if inExp {
				expDigits++
				if exp = exp*10 + int(c-'0'); expDigits > 6 || exp > 100_000 {
					return errors.New("a number's exponent is beyond what Postgres's numeric stores")
				}
			} else if digits++; digits > 100_000 {
				return errors.New("a number has more digits than Postgres's numeric stores")
			}
		case c == 'e' || c == 'E':
			inExp, expDigits, exp = true, 0, 0
		case c == '.' || c == '-' || c == '+':
		default:
			digits, inExp = 0, false
		}
	}
	return nil
}

// validText reports whether Postgres can store s as text.
func validText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
