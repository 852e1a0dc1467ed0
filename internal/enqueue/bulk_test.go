package enqueue

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// finishedStates keeps, per key, only the finished states every job of the key counts.
func TestFinishedStates_IntersectsTheJobsOfAKey(t *testing.T) {
	t.Parallel()
	k, other, plain := "k", "other", "plain"
	got := finishedStates([]Job{
		{UniqueKey: &k, UniqueStates: []string{"queued", "running", "succeeded", "dead"}},
		{UniqueKey: &other, UniqueStates: []string{"queued", "running", "succeeded"}},
		{UniqueKey: &k, UniqueStates: []string{"queued", "running", "dead"}},
		{UniqueKey: &plain},
		{UniqueKey: &other},
		{},
	})
	assert.Equal(t, []string{"queued", "running", "dead"}, got[k])
	assert.Empty(t, got[other], "one job of the key counts no finished state")
	assert.Empty(t, got[plain])
}
