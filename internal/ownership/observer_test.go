package ownership

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// at is a value of expires_at as the database returns it.
func at(sec int64) pgtype.Timestamptz {
	return pgtype.Timestamptz{Time: time.Unix(sec, 0), Valid: true}
}

// sight is one observation of worker "w": seconds after the test's start, the value seen
// (0: its row is gone), and whether it carries the ended mark.
type sight struct {
	after float64
	value int64
	ended bool
}

// The judgement depends only on what the observer saw and when, by its own clock: the
// values themselves (the server's timestamps) may jump anywhere.
func TestObserver_JudgesByUnchangedValueOverItsOwnClock(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	for _, tc := range []struct {
		name     string
		sights   []sight
		judgeAt  float64 // seconds after t0
		after    time.Duration
		wantDead bool
	}{
		{name: "first seen a lease ago, unchanged: dead", judgeAt: 10,
			sights: []sight{{0, 100, false}, {5, 100, false}}, after: workerTTL, wantDead: true},
		{name: "never seen for a lease yet: alive, whatever its value says", judgeAt: 9.9,
			sights: []sight{{0, 1, false}}, after: workerTTL},
		{name: "changed since (a renewal, even one that steps far back): alive", judgeAt: 12,
			sights: []sight{{0, 100, false}, {5, 20, false}}, after: workerTTL},
		{name: "changed forward by a huge step: alive", judgeAt: 12,
			sights: []sight{{0, 100, false}, {5, 100_000, false}}, after: workerTTL},
		{name: "ended its own lease: dead at once", judgeAt: 0.1,
			sights: []sight{{0, 100, true}}, after: workerTTL, wantDead: true},
		{name: "dead, not yet prunable", judgeAt: 30,
			sights: []sight{{0, 100, false}}, after: workerTTL + pruneWorkersAfter},
		{name: "dead for a minute: prunable", judgeAt: 70,
			sights: []sight{{0, 100, false}}, after: workerTTL + pruneWorkersAfter, wantDead: true},
		{name: "row gone: forgotten", judgeAt: 20,
			sights: []sight{{0, 100, false}, {1, 0, false}}, after: workerTTL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := newObserver()
			for _, s := range tc.sights {
				when := t0.Add(time.Duration(s.after * float64(time.Second)))
				if s.value == 0 {
					o.observe(when, nil, nil, nil)
					continue
				}
				o.observe(when, []string{"w"}, []pgtype.Timestamptz{at(s.value)}, []bool{s.ended})
			}
			ids, seen := o.dead(t0.Add(time.Duration(tc.judgeAt*float64(time.Second))), tc.after)
			if got := len(ids) == 1; got != tc.wantDead {
				t.Fatalf("dead = %v (%v), want %v", got, ids, tc.wantDead)
			}
			if tc.wantDead && !sameValue(seen[0], at(tc.sights[len(tc.sights)-1].value)) {
				t.Fatalf("value passed = %v, want the last seen", seen[0])
			}
		})
	}
}

// The reclaim runs when the next judgement falls due: a lease after the first sight of a
// value that has not changed since, never for a worker already judged.
func TestObserver_UntilJudgementIsTheEarliestDueJudgement(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	o := newObserver()
	_, ok := o.untilJudgement(t0)
	if ok {
		t.Fatal("a judgement due with no worker seen")
	}
	o.observe(t0, []string{"a", "b", "c"}, []pgtype.Timestamptz{at(1), at(2), at(3)}, []bool{false, false, true})
	o.observe(t0.Add(4*time.Second), []string{"a", "b", "c"}, []pgtype.Timestamptz{at(1), at(20), at(3)}, []bool{false, false, true})
	if d, ok := o.untilJudgement(t0.Add(5 * time.Second)); !ok || d != 5*time.Second {
		t.Fatalf("until judgement = %v, %v; want a's, 5s", d, ok)
	}
	if d, ok := o.untilJudgement(t0.Add(11 * time.Second)); !ok || d != 3*time.Second {
		t.Fatalf("until judgement = %v, %v; want b's, 3s (a is judged, c ended)", d, ok)
	}
}
