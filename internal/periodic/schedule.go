// This file holds the schedules and the misfire policies, the validation of the periodic
// jobs a worker declares, and the walk over due occurrences that picks which to enqueue.

package periodic

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/skiplock/skiplock/internal/enqueue"
)

// Schedule says when a periodic job runs: Next returns the first occurrence after t (the
// root's Schedule is an alias of it).
type Schedule interface {
	Next(t time.Time) time.Time
}

// Every returns a Schedule with an occurrence every d, on whole multiples of d since
// 0001-01-01 UTC (time.Truncate's count; for a d that divides a day the same as from the
// Unix epoch), so every worker computes the same occurrences. Validate refuses a non-positive d.
func Every(d time.Duration) Schedule { return every{d} }

type every struct{ d time.Duration }

func (e every) Next(t time.Time) time.Time {
	if e.d <= 0 {
		return time.Time{}
	}
	return t.Truncate(e.d).Add(e.d)
}

func (e every) String() string { return "every " + e.d.String() }

// Misfire says what a periodic job does with occurrences missed while no worker ran it
// (the root's Misfire is an alias of it, documented there).
type Misfire int

// The misfire policies.
const (
	// MisfireRunOnce enqueues the latest missed occurrence unless one on time is enqueued.
	MisfireRunOnce Misfire = iota
	// MisfireSkip drops missed occurrences.
	MisfireSkip
	// MisfireBackfill enqueues the latest BackfillLimit missed occurrences.
	MisfireBackfill
)

func (m Misfire) describe(limit int) string {
	switch m {
	case MisfireSkip:
		return "skip"
	case MisfireBackfill:
		return "backfill:" + strconv.Itoa(limit)
	default:
		return "run_once"
	}
}

// The defaults of a Spec's fields.
const (
	// DefaultMisfireAfter is the default of MisfireAfter.
	DefaultMisfireAfter = time.Minute
	// DefaultBackfillLimit is the default of BackfillLimit.
	DefaultBackfillLimit = 10
)

// maxOccurrences bounds the occurrences kept while walking missed ones.
const maxOccurrences = 10_000

// farFuture stands for "never" in next_run_at, for a schedule with no next occurrence.
var farFuture = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)

// Spec is a periodic job as a worker declares it (the root's PeriodicJob), in the
// engine's terms.
type Spec struct {
	Name          string
	Schedule      Schedule
	Misfire       Misfire
	BackfillLimit int           // zero: DefaultBackfillLimit
	MisfireAfter  time.Duration // zero: DefaultMisfireAfter
	RunAt         time.Time     // the job options' RunAt, which must be zero
	// Prepare validates the job and returns it ready to insert, running at at (zero: as
	// its options say). It writes nothing.
	Prepare func(at time.Time) (enqueue.Job, error)
}

// Entry is a validated Spec, with its defaults filled.
type Entry struct {
	Spec
	desc    string // the schedule's description
	misfire string // the policy's description
	kind    string // of the job it enqueues
	queue   string
}

// InvalidError is a Spec that Validate refuses: a field out of range (Field, Value and
// Fix say which and what to use), or a job its Prepare refused (Err).
type InvalidError struct {
	Index             int    // in the slice given to Validate
	Name              string // the Spec's Name
	Field, Value, Fix string
	Err               error
}

func (e *InvalidError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("periodic job %d (%q): %v", e.Index, enqueue.Truncate(e.Name, 40), e.Err)
	}
	return fmt.Sprintf("periodic job %d: %s is %s: %s", e.Index, e.Field, e.Value, e.Fix)
}

func (e *InvalidError) Unwrap() error { return e.Err }

// Validate checks the Specs of a worker and prepares their entries, by name.
func Validate(specs []Spec) (map[string]*Entry, error) {
	out := map[string]*Entry{}
	for i, p := range specs {
		if err := check(p, out[p.Name] != nil); err != nil {
			err.Index, err.Name = i, p.Name
			return nil, err
		}
		if p.BackfillLimit == 0 {
			p.BackfillLimit = DefaultBackfillLimit
		}
		if p.MisfireAfter == 0 {
			p.MisfireAfter = DefaultMisfireAfter
		}
		j, err := p.Prepare(time.Time{}) // the same validation every occurrence gets
		if err != nil {
			return nil, &InvalidError{Index: i, Name: p.Name, Err: err}
		}
		desc := fmt.Sprintf("%T", p.Schedule)
		if s, ok := p.Schedule.(fmt.Stringer); ok {
			desc = s.String()
		}
		out[p.Name] = &Entry{Spec: p, desc: desc, misfire: p.Misfire.describe(p.BackfillLimit),
			kind: j.Kind, queue: j.Queue}
	}
	return out, nil
}

// check returns what is out of range in p, or nil; twice says its name is taken.
func check(p Spec, twice bool) *InvalidError {
	bad := func(field, value, fix string) *InvalidError {
		return &InvalidError{Field: field, Value: value, Fix: fix}
	}
	switch {
	case p.Name == "" || len(p.Name) > 128 || !enqueue.ValidText(p.Name):
		return bad("Name", strconv.Quote(enqueue.Truncate(p.Name, 40)), "use 1-128 bytes of UTF-8 without NUL")
	case twice:
		return bad("Name", strconv.Quote(enqueue.Truncate(p.Name, 40)), "it is declared twice: names must be unique")
	case p.Schedule == nil:
		return bad("Schedule", "nil", "set one, such as skiplock.Every(time.Hour) or a cron.Parse result")
	case p.Misfire < MisfireRunOnce || p.Misfire > MisfireBackfill:
		return bad("Misfire", strconv.Itoa(int(p.Misfire)), "use MisfireRunOnce, MisfireSkip or MisfireBackfill")
	case p.BackfillLimit < 0:
		return bad("BackfillLimit", strconv.Itoa(p.BackfillLimit), "use 0 for the default or a positive count")
	case p.MisfireAfter < 0:
		return bad("MisfireAfter", p.MisfireAfter.String(), "use 0 for the default or a positive duration")
	case p.MisfireAfter > 0 && p.MisfireAfter < tick:
		// The runner looks for due occurrences every tick and enqueues them some
		// milliseconds late: a shorter MisfireAfter would call most of them missed.
		return bad("MisfireAfter", p.MisfireAfter.String(), "use 0 for the default or at least "+tick.String()+
			" (the runner looks for due occurrences every "+tick.String()+"; a shorter one would skip most of them)")
	case !p.RunAt.IsZero():
		return bad("Options.RunAt", p.RunAt.Format(time.RFC3339), "leave it zero: each job runs at its occurrence")
	}
	if e, ok := p.Schedule.(every); ok && e.d <= 0 {
		return bad("Schedule", "Every("+e.d.String()+")", "use a positive interval")
	}
	return nil
}

// occurrences returns which of e's occurrences from first to now (inclusive) to enqueue,
// by its misfire policy, and the first occurrence after now.
func occurrences(e *Entry, first, now time.Time) (enqueue []time.Time, next time.Time) {
	late := now.Add(-e.MisfireAfter)
	var missed, onTime []time.Time
	missedCount := 0
	t := first
	for !t.After(now) {
		if t.After(late) {
			onTime = append(onTime, t)
			if len(onTime) > maxOccurrences {
				onTime = onTime[1:]
			}
		} else {
			missedCount++
			missed = append(missed, t)
			if len(missed) > 2*maxOccurrences {
				missed = slices.Clone(missed[len(missed)-maxOccurrences:])
			}
		}
		nt := e.Schedule.Next(t)
		if !nt.After(t) { // no further occurrence (or a broken Schedule)
			nt = farFuture
		}
		t = nt
	}
	switch {
	case e.Misfire == MisfireBackfill:
		enqueue = append(enqueue, missed[max(0, len(missed)-e.BackfillLimit):]...)
	case e.Misfire == MisfireRunOnce && len(onTime) == 0 && missedCount > 0:
		enqueue = append(enqueue, missed[len(missed)-1])
	}
	return append(enqueue, onTime...), t
}

// nextAfter is the first occurrence of s after t, or farFuture when there is none.
func nextAfter(s Schedule, t time.Time) time.Time {
	n := s.Next(t)
	if !n.After(t) {
		return farFuture
	}
	return n
}
