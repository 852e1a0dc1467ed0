// This file holds the set of queues a worker works.

package claim

import (
	"cmp"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/skiplock/skiplock/internal/jobtype"
)

// QueueSet is a worker's queues by name, read by its running parts (claim loops,
// executor, poller, pause and flow watchers, listener) while AddQueue and RemoveQueue
// change it.
type QueueSet struct {
	mu sync.RWMutex
	m  map[string]*QueueRunner
	// modes is each queue's completion mode ([QueueConfig].Completion) where one is set,
	// kept after the queue is removed: the jobs it was running are recorded as it said.
	// Every success reads it (Mode), without a lock: Put, under mu, replaces the map
	// with a changed copy, and no map once published is written again.
	modes atomic.Pointer[map[string]jobtype.Completion]
}

func NewQueueSet() *QueueSet {
	s := &QueueSet{m: map[string]*QueueRunner{}}
	s.modes.Store(&map[string]jobtype.Completion{})
	return s
}

// Get returns the queue named name, or nil.
func (s *QueueSet) Get(name string) *QueueRunner {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.m[name]
}

// All returns the queues, in name order.
func (s *QueueSet) All() []*QueueRunner {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*QueueRunner, 0, len(s.m))
	for _, q := range s.m {
		out = append(out, q)
	}
	slices.SortFunc(out, func(a, b *QueueRunner) int { return cmp.Compare(a.name, b.name) })
	return out
}

// Names returns the queues' names, sorted.
func (s *QueueSet) Names() []string {
	qs := s.All()
	out := make([]string, len(qs))
	for i, q := range qs {
		out[i] = q.name
	}
	return out
}

// Len returns how many queues the set holds.
func (s *QueueSet) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.m)
}

// Put adds q with its completion mode.
func (s *QueueSet) Put(q *QueueRunner, mode jobtype.Completion) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[q.name] = q
	if (*s.modes.Load())[q.name] == mode {
		return
	}
	modes := maps.Clone(*s.modes.Load())
	if mode == 0 {
		delete(modes, q.name)
	} else {
		modes[q.name] = mode
	}
	s.modes.Store(&modes)
}

// Drop removes the queue named name and returns it, or nil.
func (s *QueueSet) Drop(name string) *QueueRunner {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.m[name]
	delete(s.m, name)
	return q
}

// Mode returns the completion mode set for queue (0: none). It takes no lock: it is
// read for every success.
func (s *QueueSet) Mode(queue string) jobtype.Completion {
	return (*s.modes.Load())[queue]
}
