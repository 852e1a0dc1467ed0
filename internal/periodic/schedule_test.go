package periodic

import (
	"errors"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/enqueue"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func hours(first int, n int) []time.Time {
	var out []time.Time
	for i := range n {
		out = append(out, t0.Add(time.Duration(first+i)*time.Hour))
	}
	return out
}

// once is a Schedule with one occurrence: at.
type once struct{ at time.Time }

func (o once) Next(t time.Time) time.Time {
	if t.Before(o.at) {
		return o.at
	}
	return time.Time{}
}

func TestOccurrences_MisfirePolicies(t *testing.T) {
	t.Parallel()
	hourly := Every(time.Hour)
	cases := []struct {
		name     string
		e        Entry
		first    time.Time
		now      time.Time
		want     []time.Time
		wantNext time.Time
	}{
		{"on time: the one due", Entry{Spec: Spec{Schedule: hourly, MisfireAfter: time.Minute}},
			t0, t0.Add(30 * time.Second), hours(0, 1), t0.Add(time.Hour)},
		{"run once: the latest of four missed", Entry{Spec: Spec{Schedule: hourly, MisfireAfter: time.Minute}},
			t0.Add(-3 * time.Hour), t0.Add(10 * time.Minute), hours(0, 1), t0.Add(time.Hour)},
		{"run once: an on-time occurrence stands for the missed", Entry{Spec: Spec{Schedule: hourly, MisfireAfter: time.Minute}},
			t0.Add(-3 * time.Hour), t0.Add(30 * time.Second), hours(0, 1), t0.Add(time.Hour)},
		{"skip: none of the missed", Entry{Spec: Spec{Schedule: hourly, Misfire: MisfireSkip, MisfireAfter: time.Minute}},
			t0.Add(-3 * time.Hour), t0.Add(10 * time.Minute), nil, t0.Add(time.Hour)},
		{"skip: the on-time one still runs", Entry{Spec: Spec{Schedule: hourly, Misfire: MisfireSkip, MisfireAfter: time.Minute}},
			t0.Add(-3 * time.Hour), t0.Add(30 * time.Second), hours(0, 1), t0.Add(time.Hour)},
		{"backfill: the latest two missed", Entry{Spec: Spec{Schedule: hourly, Misfire: MisfireBackfill, BackfillLimit: 2, MisfireAfter: time.Minute}},
			t0.Add(-3 * time.Hour), t0.Add(10 * time.Minute), hours(-1, 2), t0.Add(time.Hour)},
		{"backfill: missed then on time", Entry{Spec: Spec{Schedule: hourly, Misfire: MisfireBackfill, BackfillLimit: 10, MisfireAfter: 2 * time.Hour}},
			t0.Add(-3 * time.Hour), t0, hours(-3, 4), t0.Add(time.Hour)},
		{"no further occurrence: next is far future", Entry{Spec: Spec{Schedule: once{t0}, MisfireAfter: time.Minute}},
			t0, t0, hours(0, 1), farFuture},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, next := occurrences(&c.e, c.first, c.now)
			if len(got) != len(c.want) {
				t.Fatalf("occurrences = %v, want %v", got, c.want)
			}
			for i := range got {
				if !got[i].Equal(c.want[i]) {
					t.Fatalf("occurrences = %v, want %v", got, c.want)
				}
			}
			if !next.Equal(c.wantNext) {
				t.Fatalf("next = %v, want %v", next, c.wantNext)
			}
		})
	}
}

func TestOccurrences_ManyMissedKeepsABoundedTail(t *testing.T) {
	t.Parallel()
	e := Entry{Spec: Spec{Schedule: Every(time.Second), Misfire: MisfireBackfill, BackfillLimit: 3, MisfireAfter: time.Second}}
	now := t0.Add(5 * maxOccurrences * time.Second)
	got, next := occurrences(&e, t0, now)
	want := []time.Time{now.Add(-3 * time.Second), now.Add(-2 * time.Second), now.Add(-time.Second), now}
	if len(got) != len(want) {
		t.Fatalf("occurrences = %v, want %v", got, want)
	}
	for i := range got {
		if !got[i].Equal(want[i]) {
			t.Fatalf("occurrences = %v, want %v", got, want)
		}
	}
	if !next.Equal(now.Add(time.Second)) {
		t.Fatalf("next = %v", next)
	}
}

func TestNextAfter(t *testing.T) {
	t.Parallel()
	if got := nextAfter(Every(time.Minute), t0.Add(10*time.Second)); !got.Equal(t0.Add(time.Minute)) {
		t.Errorf("Every(1m) after 12:00:10 = %v, want 12:01", got)
	}
	if got := nextAfter(once{t0}, t0); !got.Equal(farFuture) {
		t.Errorf("a schedule with no later occurrence = %v, want farFuture", got)
	}
	if got := nextAfter(Every(0), t0); !got.Equal(farFuture) {
		t.Errorf("Every(0) = %v, want farFuture", got)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	prepare := func(time.Time) (enqueue.Job, error) { return enqueue.Job{Kind: "k", Queue: "q"}, nil }
	ok := Spec{Name: "a", Schedule: Every(time.Hour), Prepare: prepare}
	errPrep := errors.New("bad args")
	cases := []struct {
		name  string
		specs []Spec
		field string // "": the Prepare error err
		err   error
	}{
		{"empty name", []Spec{{Schedule: Every(time.Hour), Prepare: prepare}}, "Name", nil},
		{"name twice", []Spec{ok, ok}, "Name", nil},
		{"nil schedule", []Spec{{Name: "a", Prepare: prepare}}, "Schedule", nil},
		{"non-positive Every", []Spec{{Name: "a", Schedule: Every(-time.Second), Prepare: prepare}}, "Schedule", nil},
		{"unknown misfire", []Spec{{Name: "a", Schedule: Every(time.Hour), Misfire: 7, Prepare: prepare}}, "Misfire", nil},
		{"negative backfill", []Spec{{Name: "a", Schedule: Every(time.Hour), BackfillLimit: -1, Prepare: prepare}}, "BackfillLimit", nil},
		{"negative misfire after", []Spec{{Name: "a", Schedule: Every(time.Hour), MisfireAfter: -1, Prepare: prepare}}, "MisfireAfter", nil},
		{"RunAt set", []Spec{{Name: "a", Schedule: Every(time.Hour), RunAt: t0, Prepare: prepare}}, "Options.RunAt", nil},
		{"job refused", []Spec{{Name: "a", Schedule: Every(time.Hour), Prepare: func(time.Time) (enqueue.Job, error) { return enqueue.Job{}, errPrep }}}, "", errPrep},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Validate(c.specs)
			var bad *InvalidError
			if !errors.As(err, &bad) {
				t.Fatalf("Validate = %v, want an *InvalidError", err)
			}
			if bad.Field != c.field || bad.Err != c.err {
				t.Fatalf("Validate = %#v, want field %q, err %v", bad, c.field, c.err)
			}
		})
	}
	entries, err := Validate([]Spec{ok})
	if err != nil {
		t.Fatal(err)
	}
	e := entries["a"]
	if e.BackfillLimit != DefaultBackfillLimit || e.MisfireAfter != DefaultMisfireAfter || e.desc != "every 1h0m0s" ||
		e.misfire != "run_once" || e.kind != "k" || e.queue != "q" {
		t.Fatalf("entry = %+v, want the defaults filled and the descriptions", e)
	}
}

// TestEvery_OnMultiplesOfItsIntervalSinceYear1 pins the alignment the docs state:
// occurrences on whole multiples of the interval since 0001-01-01 UTC, which for an
// interval that divides a day are multiples from the Unix epoch too (the minute, the
// hour), and for 168 hours fall on Mondays at 00:00 UTC, not on the epoch's Thursdays.
func TestEvery_OnMultiplesOfItsIntervalSinceYear1(t *testing.T) {
	at := time.Date(2026, 12, 9, 13, 37, 12, 0, time.UTC) // a Wednesday
	cases := []struct {
		d    time.Duration
		want time.Time
	}{
		{time.Minute, time.Date(2026, 12, 9, 13, 38, 0, 0, time.UTC)},
		{time.Hour, time.Date(2026, 12, 9, 14, 0, 0, 0, time.UTC)},
		{6 * time.Hour, time.Date(2026, 12, 9, 18, 0, 0, 0, time.UTC)},
		{24 * time.Hour, time.Date(2026, 12, 10, 0, 0, 0, 0, time.UTC)},
		{7 * 24 * time.Hour, time.Date(2026, 12, 14, 0, 0, 0, 0, time.UTC)}, // a Monday
	}
	for _, c := range cases {
		got := Every(c.d).Next(at)
		if !got.Equal(c.want) {
			t.Errorf("Every(%s).Next(%s) = %s, want %s", c.d, at, got, c.want)
		}
		if c.d <= 24*time.Hour && got.Unix()%int64(c.d/time.Second) != 0 {
			t.Errorf("Every(%s): %s is not a multiple of it from the Unix epoch", c.d, got)
		}
	}
	if got := Every(7 * 24 * time.Hour).Next(at); got.Weekday() != time.Monday {
		t.Errorf("Every(168h) falls on a %s", got.Weekday())
	}
}
