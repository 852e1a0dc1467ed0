// This file holds the CPU-starvation fault: a stressor of busy processes (the worker
// program run with -spin), StarveProcs of them, at least four per core by default, for
// StarveFor, while the workers go on with the run's lease settings. A heartbeat that
// cannot get the CPU in time lets a lease end while its handler still runs; the analysis
// counts the overlapping executions that touch a starvation window apart. With StallFor,
// one busy worker is also stopped outright (SIGSTOP) for that long.

package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// stressor is the running busy processes of one starvation fault.
type stressor struct {
	cmds []*exec.Cmd
}

// startStressor starts n busy processes of bin (-spin), each in a process group of its
// own and killed with the harness. On an error it stops those it started.
func startStressor(bin string, n int) (*stressor, error) {
	s := &stressor{}
	for range n {
		cmd := exec.Command(bin, "-spin")
		cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
		setProcAttr(cmd)
		if err := cmd.Start(); err != nil {
			s.stop()
			return nil, fmt.Errorf("chaos: starting the CPU stressor: %w", err)
		}
		s.cmds = append(s.cmds, cmd)
	}
	return s, nil
}

// stop kills every busy process and waits for them.
func (s *stressor) stop() {
	for _, c := range s.cmds {
		if err := signalGroup(c.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			_ = c.Process.Kill()
		}
	}
	for _, c := range s.cmds {
		_ = c.Wait()
	}
	s.cmds = nil
}

// starve runs the stressor for StarveFor. The workers keep their lease settings (after
// the rolling deploy, the deploy's shorter visibility timeout).
func (r *runner) starve(ctx context.Context, f *Fault) error {
	f.At = time.Now().Round(0)
	s, err := startStressor(r.bin, r.opts.StarveProcs)
	if err != nil {
		return err
	}
	// With StallFor, one busy worker gets no CPU at all for that long (SIGSTOP), at the
	// start of the starvation: the deterministic form of a heartbeat that cannot run.
	stalled := make(chan string, 1)
	if r.opts.StallFor > 0 {
		go func() { stalled <- r.stall(ctx) }()
	} else {
		stalled <- ""
	}
	// The least time left on the workers' rows and their jobs' leases, meanwhile: what a
	// renewal cadence must keep above zero under starvation.
	sctx, stopSampling := context.WithDeadline(ctx, f.At.Add(r.opts.StarveFor))
	m := r.sampleMargins(sctx)
	stopSampling()
	stall := <-stalled
	err = ctx.Err()
	s.stop()
	f.End = time.Now().Round(0)
	if err != nil {
		return err
	}
	f.Detail = fmt.Sprintf("%d busy processes (%d cores) for %s", r.opts.StarveProcs, numCPU(), fmtDur(f.End.Sub(f.At)))
	if m.ok {
		f.Detail += fmt.Sprintf("; least time left on a worker's row %.2fs, on a running job's lease %.2fs", m.worker, m.job)
	}
	f.Detail += stall
	return nil
}

// stall stops a busy follower with SIGSTOP for StallFor, then continues it, and says what
// it did. Not the leader: while it is stopped nobody would sweep (the leader's term
// outlasts a short stall), and its jobs would wait for it rather than for their leases.
func (r *runner) stall(ctx context.Context) string {
	p := r.fleet.currentProc(r.pickRecoveryVictim(ctx, 1))
	if p == nil {
		return "; no worker to stall"
	}
	held, _ := r.heldBy(ctx, p.id)
	if err := pauseProcess(p.pid); err != nil {
		return fmt.Sprintf("; stalling %s failed: %v", p.id, err)
	}
	began := time.Now()
	_ = sleepUntil(ctx, began.Add(r.opts.StallFor))
	if err := resumeProcess(p.pid); err != nil {
		return fmt.Sprintf("; resuming %s failed: %v", p.id, err)
	}
	return fmt.Sprintf("; worker %s stopped (SIGSTOP) for %s holding %d running jobs, then continued",
		p.id, fmtDur(time.Since(began)), len(held))
}

// starvedDuring reports whether [from, to] meets the window of a starvation fault.
func (r *runner) starvedDuring(from, to time.Time) bool {
	for _, f := range r.faults {
		if f.Kind == FaultStarve && !from.After(f.End) && !to.Before(f.At) {
			return true
		}
	}
	return false
}
