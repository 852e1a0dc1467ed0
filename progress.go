// This file holds what a running handler reports besides its error: its progress (a
// number and a short message), written by the worker's heartbeat, its output (JSON),
// written with its success, and its log records (Logger), written when the attempt
// ends. All live in the handler's context until then.

package skiplock

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"unicode/utf8"

	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/record"
)

// ErrNotInJob is returned by [RecordProgress], [SetOutput], [Step], [StepTx], [Sleep] and
// [AwaitSignal] when their context is not a job handler's (or one derived from it).
var ErrNotInJob = jobtype.ErrNotInJob

// MaxProgressMessage is the longest progress message, in bytes; longer ones are cut.
const MaxProgressMessage = 255

// RecordProgress records the running job's progress: a number (a percentage, a count of
// items done — the handler decides what it means) and a short message. It writes nothing
// itself and costs no statement: the worker's next heartbeat (every VisibilityTimeout/3)
// writes the latest value in the same update that renews the lease, and a success writes
// it with the completion. [Client.Get] and the CLI show it as [JobRow].Progress; it stays
// on the row after the attempt. A message is cut to [MaxProgressMessage] bytes, with NUL
// bytes and invalid UTF-8 replaced. ctx is the handler's; value must be finite.
func RecordProgress(ctx context.Context, value float64, message string) error {
	st := jobtype.StateOf(ctx)
	if st == nil {
		return ErrNotInJob
	}
	if math.IsNaN(value) || math.IsInf(value, 0) {
		return fmt.Errorf("%w: progress value %v is not a finite number", ErrInvalidPayload, value)
	}
	message = record.StorableMessage(message)
	if len(message) > MaxProgressMessage {
		cut := MaxProgressMessage
		for cut > 0 && !utf8.RuneStart(message[cut]) {
			cut--
		}
		message = message[:cut]
	}
	b, err := json.Marshal(Progress{Value: value, Message: message})
	if err != nil {
		return fmt.Errorf("%w: progress: %v", ErrInvalidPayload, err)
	}
	st.SetProgress(string(b))
	return nil
}

// SetOutput records v, marshalled to JSON, as the job's output: it is stored with the
// job's success, in the same statement, and shown by [Client.Get] as [JobRow].Output. A
// later call replaces an earlier one. An attempt that fails stores no output; with
// [CompletionDelete] nothing is stored. It returns [ErrInvalidPayload] when v does not
// marshal to JSON that Postgres's jsonb takes, and [ErrPayloadTooLarge] when it is larger
// than [Config].MaxPayloadBytes. ctx is the handler's.
func SetOutput(ctx context.Context, v any) error {
	st := jobtype.StateOf(ctx)
	if st == nil {
		return ErrNotInJob
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("%w: output: %v", ErrInvalidPayload, err)
	}
	if err := checkJSONB(b); err != nil {
		return fmt.Errorf("%w: output: %v", payloadErr(err), err)
	}
	if st.MaxBytes > 0 && len(b) > st.MaxBytes {
		return fmt.Errorf("%w: output is %d bytes, the limit is %d (Config.MaxPayloadBytes)", ErrPayloadTooLarge, len(b), st.MaxBytes)
	}
	st.SetOutput(string(b))
	return nil
}

// Logger returns a logger whose records are kept with the running job, per attempt, and
// shown by [Client.Logs], the CLI (skiplock logs ID) and the dashboard's job page. Every
// level from debug up is kept, with its attributes (and those of With and WithGroup) as
// JSON; the records are not printed anywhere else (wrap the handler to also send them to
// your own logger). An attempt keeps at most [MaxLogRecords] records and [MaxLogBytes]
// bytes of messages and attributes; the first record that does not fit (one alone over
// MaxLogBytes included) and every record after it are dropped, and one warning record
// at the end says how many. The records are written when the attempt
// ends, before its outcome, in one batched insert shared with other attempts that
// logged; an attempt that logs nothing writes nothing. They are removed with their job
// (Delete, retention, the delete completion mode). It is safe for concurrent use.
//
// ctx is the handler's (or one derived from it). Outside a job's attempt it returns a
// logger that discards every record.
func Logger(ctx context.Context) *slog.Logger {
	st := jobtype.StateOf(ctx)
	if st == nil || st.Row == nil {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(jobtype.NewJobLogHandler(st, st.Row))
}

// The bounds of one attempt's log records ([Logger]).
const (
	MaxLogRecords = jobtype.MaxLogRecords // records per attempt
	MaxLogBytes   = jobtype.MaxLogBytes   // bytes of messages and attributes per attempt
)
