package skiplock

import (
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
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

// With hold, a batch is not sent because nothing is in flight: it waits for an item
// given with postLast (or for maxRows, or its window), so that the items of one burst go
// together (the completer's successes of jobs holding a concurrency slot).
func TestGroupCommit_HoldSendsOnLastOrMaxRows(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var writes [][]int
	g := &groupCommit[int]{window: time.Hour, maxRows: 3, maxInFlight: 2, hold: true, write: func(items []int) {
		mu.Lock()
		defer mu.Unlock()
		writes = append(writes, slices.Clone(items))
	}}
	sent := func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.open == nil
	}
	g.post(1, 1)
	g.post(2, 1)
	if sent() {
		t.Fatal("a held batch was sent before its last item")
	}
	g.postLast(3, 1)
	g.wait()
	g.post(4, 1)
	g.post(5, 1)
	g.post(6, 1) // maxRows
	g.wait()
	mu.Lock()
	defer mu.Unlock()
	if want := [][]int{{1, 2, 3}, {4, 5, 6}}; !reflect.DeepEqual(writes, want) {
		t.Fatalf("batches written: %v, want %v", writes, want)
	}
}
