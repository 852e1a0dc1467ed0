package jobtype

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stdJobCtx is what a JobCtx stands for: the standard library's contexts stacked as the
// executor stacked them before JobCtx (a cancel with a cause, the state, the timeout).
func stdJobCtx(parent context.Context, timeout time.Duration) (context.Context, context.CancelCauseFunc, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	ctx, _ = WithState(ctx, 0)
	tctx, stop := context.WithTimeoutCause(ctx, timeout, ErrJobTimeout)
	return tctx, cancel, stop
}

// ended reports a context's error and cause and those of a context derived from it
// (context.WithCancel) before it ended, once both are done.
func ended(t *testing.T, ctx, child context.Context) [4]error {
	t.Helper()
	for _, c := range []context.Context{ctx, child} {
		select {
		case <-c.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("context not done")
		}
	}
	return [4]error{ctx.Err(), context.Cause(ctx), child.Err(), context.Cause(child)}
}

// A JobCtx ends as the standard contexts it replaces end: timed out, cancelled with a
// cause, or with its parent; its children and AfterFuncs with it; its deadline is the
// earlier of its own and its parent's; its state and its parent's values are found.
func TestJobCtx_MatchesStandardContexts(t *testing.T) {
	type key struct{}
	cause := errors.New("lost")
	cases := map[string]func(jc *JobCtx, cancelStd context.CancelCauseFunc, parentCancel context.CancelCauseFunc){
		"timeout":      func(jc *JobCtx, _, _ context.CancelCauseFunc) { jc.TimeOut() },
		"cancel cause": func(jc *JobCtx, std, _ context.CancelCauseFunc) { jc.Cancel(cause); std(cause) },
		"cancel nil":   func(jc *JobCtx, std, _ context.CancelCauseFunc) { jc.Cancel(nil); std(nil) },
		"parent":       func(_ *JobCtx, _, parent context.CancelCauseFunc) { parent(ErrShutdown) },
	}
	for name, end := range cases {
		t.Run(name, func(t *testing.T) {
			parent, parentCancel := context.WithCancelCause(context.WithValue(context.Background(), key{}, "v"))
			defer parentCancel(nil)
			timeout := time.Hour
			if name == "timeout" {
				timeout = time.Millisecond
			}
			std, stdCancel, stop := stdJobCtx(parent, timeout)
			defer stop()
			jc := NewJobCtx(parent, 0, true)
			jc.SetDeadline(time.Now().Add(timeout))
			stdChild, c1 := context.WithCancel(std)
			defer c1()
			jcChild, c2 := context.WithCancel(jc)
			defer c2()
			after := make(chan struct{})
			context.AfterFunc(jc, func() { close(after) })

			require.NoError(t, jc.Err())
			require.NoError(t, context.Cause(jc))
			assert.Equal(t, "v", jc.Value(key{}))
			assert.Same(t, jc.State(), StateOf(jc))
			d, ok := jc.Deadline()
			assert.True(t, ok)
			assert.WithinDuration(t, time.Now().Add(timeout), d, time.Second)

			end(jc, stdCancel, parentCancel)
			assert.Equal(t, ended(t, std, stdChild), ended(t, jc, jcChild))
			<-after
			assert.Equal(t, "v", jc.Value(key{}), "values after the end")
			assert.Same(t, jc.State(), StateOf(jc))
			jc.Cancel(errors.New("later")) // ended once: nothing changes
			assert.Equal(t, ended(t, std, stdChild), ended(t, jc, jcChild))
		})
	}
}

// A JobCtx derived from an ended parent is born ended; a deadline of the parent earlier
// than its own is the one it reports; one that does not watch its parent ignores it.
func TestJobCtx_Parent(t *testing.T) {
	parent, cancel := context.WithCancelCause(context.Background())
	cancel(ErrShutdown)
	jc := NewJobCtx(parent, 0, false)
	assert.ErrorIs(t, jc.Err(), context.Canceled)
	assert.ErrorIs(t, context.Cause(jc), ErrShutdown)
	<-jc.Done()

	early := time.Now().Add(time.Minute)
	dl, stop := context.WithDeadline(context.Background(), early)
	defer stop()
	jc = NewJobCtx(dl, 0, false)
	jc.SetDeadline(early.Add(time.Hour))
	d, ok := jc.Deadline()
	assert.True(t, ok)
	assert.Equal(t, early, d)
	stop()
	assert.NoError(t, jc.Err(), "not watched")
	jc.Cancel(nil)
	assert.ErrorIs(t, jc.Err(), context.Canceled)
}
