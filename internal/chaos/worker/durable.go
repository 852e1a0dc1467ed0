package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/internal/chaos/audit"
)

// runDurable runs a durable job of the harness's durable phase (audit.DurableArgs): five
// steps (skiplock.StepTx), each writing one business row in its own transaction, with a
// durable sleep or a wait for a signal between two of them as the job's mode says. Every
// execution of a step's function is recorded first in chaos.durable_execs, on the audit
// pool (a connection of its own, outside the step's transaction), so that a step run again
// is counted even when its second commit would be refused.
func (h *handler) runDurable(ctx context.Context, job *skiplock.Job[audit.DurableArgs]) error {
	a := job.Args
	var signal *string
	for k := 1; k <= audit.DurableSteps; k++ {
		switch {
		case a.Mode == audit.DurableSleep && k == audit.SleepBefore:
			// Returns an error wrapping skiplock.ErrSuspended the first time: returned as is,
			// the job resumes after the sleep and runs from the top.
			if err := skiplock.Sleep(ctx, time.Duration(a.SleepMS)*time.Millisecond); err != nil {
				return err
			}
		case a.Mode == audit.DurableSignal && k == audit.WaitBefore:
			p, err := skiplock.AwaitSignal(ctx, audit.SignalName, audit.SignalTimeout)
			if err != nil {
				return err
			}
			s := string(p)
			signal = &s
		}
		var sig *string
		if k == audit.WaitBefore {
			sig = signal
		}
		if _, err := skiplock.StepTx(ctx, audit.StepName(k), func(ctx context.Context, tx pgx.Tx) (int, error) {
			return k, h.durableStep(ctx, tx, job.JobRow, k, sig)
		}); err != nil {
			return err
		}
	}
	return nil
}

// durableStep is the function of step k: it records its execution (autocommit, on the
// audit pool), works a random time up to durableWork (so that faults land inside steps),
// then writes the step's business row in tx.
func (h *handler) durableStep(ctx context.Context, tx pgx.Tx, job *skiplock.JobRow, k int, signal *string) error {
	execID := fmt.Sprintf("%s-d%d", h.id, h.n.Add(1))
	if _, err := h.audit.Exec(ctx, audit.DurableStartSQL, execID, job.ID, k, job.Attempts, h.id, time.Now()); err != nil {
		return fmt.Errorf("recording the start of step %d of job %d: %w", k, job.ID, err)
	}
	t := time.NewTimer(rand.N(h.durableWork + 1))
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
		return context.Cause(ctx)
	}
	_, err := tx.Exec(ctx, audit.DurableRowSQL, job.ID, k, execID, time.Now(), signal)
	return err
}
