package enqueue

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// insertColumns returns the column list of the first INSERT INTO {s}.jobs in sql.
func insertColumns(t *testing.T, sql string) []string {
	t.Helper()
	m := regexp.MustCompile(`INSERT INTO \{s\}\.jobs \(([^)]*)\)`).FindStringSubmatch(sql)
	if m == nil {
		t.Fatalf("no INSERT INTO {s}.jobs (...) in %q", sql)
	}
	var cols []string
	for _, c := range strings.Split(m[1], ",") {
		cols = append(cols, strings.TrimSpace(c))
	}
	slices.Sort(cols)
	return cols
}

// A column added to the single-job insert (an enqueue option stored with the job) must
// be written by the coalesced insert too, or a job enqueued in a batch of several would
// silently lose it. Unique keys never join a batch.
func TestCoalescedInsert_WritesEveryColumnTheSingleInsertWrites(t *testing.T) {
	t.Parallel()
	single := slices.DeleteFunc(insertColumns(t, insertSQL(false)), func(c string) bool { return c == "unique_key" })
	coalesced := insertColumns(t, coalescedInsertSQL)
	if !slices.Equal(single, coalesced) {
		t.Fatalf("the single insert writes %v (unique_key aside), the coalesced insert %v: add the missing columns to coalescedInsertSQL and writeBatch",
			single, coalesced)
	}
}

// Enqueue's coalescer sends a second statement at once beside one in flight
// (groupcommit's TestBatcher_SendAtOnceSendsASecondBatchBesideTheFirst shows what that
// does): with one, every caller that came while a statement ran waited for it to end,
// and 16 producers enqueued about a fifth less (coalesceSendAtOnce).
func TestCoalescer_SendsASecondStatementBesideOneInFlight(t *testing.T) {
	t.Parallel()
	co := newCoalescer(newWriter(nil, "skiplock", nil), DefaultCoalesceWindow)
	if co.batch.SendAtOnce != 2 {
		t.Fatalf("the coalescer's batcher sends at once beside %d statements in flight, want 2", co.batch.SendAtOnce-1)
	}
	if co.batch.MaxInFlight < co.batch.SendAtOnce {
		t.Fatalf("MaxInFlight %d is below SendAtOnce %d", co.batch.MaxInFlight, co.batch.SendAtOnce)
	}
}
