package claim

import (
	"reflect"
	"strings"
	"testing"

	"github.com/skiplock/skiplock/internal/jobtype"
	"github.com/skiplock/skiplock/internal/pgutil"
)

// A queue without per-dimension limits runs the statements it ran before: only the
// per-dimension variants read the jobs' concurrency keys.
func TestFlowClaimer_OnlyTheDimensionVariantsReadConcurrencyKeys(t *testing.T) {
	f := NewFlowClaimer(pgutil.DB{Schema: "s"}, 0)
	for name, sql := range map[string]string{"plain": f.plain, "keyed": f.keyed, "slots": f.slots} {
		if strings.Contains(sql, "concurrency_keys") {
			t.Errorf("the %s claim reads concurrency_keys", name)
		}
	}
	for name, sql := range map[string]string{"plainDims": f.plainDims, "keyedDims": f.keyedDims} {
		if !strings.Contains(sql, "concurrency_keys") || strings.Contains(sql, "$DIMS") || strings.Contains(sql, "$LOOK") {
			t.Errorf("the %s claim is not rendered: %s", name, sql)
		}
	}
}

// sameLimits compares every field of QueueLimits: a field added to it must be added there.
func TestSameLimits_ComparesEveryField(t *testing.T) {
	if n := reflect.TypeFor[jobtype.QueueLimits]().NumField(); n != 8 {
		t.Fatalf("QueueLimits has %d fields: compare the new ones in sameLimits, then update this count", n)
	}
	a := jobtype.QueueLimits{ConcurrencyKeys: map[string]int{"region": 2}}
	if !sameLimits(a, jobtype.QueueLimits{ConcurrencyKeys: map[string]int{"region": 2}}) ||
		sameLimits(a, jobtype.QueueLimits{ConcurrencyKeys: map[string]int{"region": 3}}) ||
		sameLimits(a, jobtype.QueueLimits{}) {
		t.Error("sameLimits does not compare ConcurrencyKeys")
	}
}
