package claim

import (
	"testing"

	"github.com/skiplock/skiplock/internal/jobtype"
)

// A queue's completion mode is the one its latest Put gave, none (0) once a Put gave
// none, and it outlives the queue's removal: the jobs the queue was running are
// recorded as it said.
func TestQueueSet_ModeIsTheLatestPutsAndOutlivesTheQueue(t *testing.T) {
	t.Parallel()
	s := NewQueueSet()
	q := NewQueueRunner("mail", 1, ClaimLoopConfig{})
	if m := s.Mode("mail"); m != 0 {
		t.Fatalf("Mode of a queue never put = %v, want 0", m)
	}
	steps := []struct {
		name string
		mode jobtype.Completion
		drop bool
	}{
		{"put with a mode", jobtype.CompletionKeep, false},
		{"put again with another", jobtype.CompletionDelete, false},
		{"dropped: its mode stays", jobtype.CompletionDelete, true},
		{"put again with none", 0, false},
		{"put with a mode again", jobtype.CompletionArchive, false},
	}
	for _, st := range steps {
		if st.drop {
			s.Drop("mail")
		} else {
			s.Put(q, st.mode)
		}
		if m := s.Mode("mail"); m != st.mode {
			t.Fatalf("%s: Mode = %v, want %v", st.name, m, st.mode)
		}
		if m := s.Mode("other"); m != 0 {
			t.Fatalf("%s: Mode of another queue = %v, want 0", st.name, m)
		}
	}
}
