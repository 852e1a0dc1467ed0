package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// stopGrace is how long a worker may take to shut down gracefully after SIGTERM before it
// is killed. Its own ShutdownTimeout is 5s.
const stopGrace = 10 * time.Second

// proc is one worker process. A slot is a place for a worker; each kill ends the slot's
// process and starts a new generation in it.
type proc struct {
	slot, gen int
	id        string // skiplock worker id (locked_by)
	pid       int
	log       string
	ends      string // the file the worker appends each execution's end to (audit.EndLine)
	cmd       *exec.Cmd
	done      chan struct{} // closed when the process has exited and been waited for
	expected  bool          // the harness ended it (kill or stop); guarded by fleet.mu
	killed    bool          // the harness killed it with SIGKILL as a fault; guarded by fleet.mu
	killAt    time.Time     // when the SIGKILL was sent
	err       error         // Wait's result, set before done closes
	exitAt    time.Time     // when it was reaped, set before done closes
}

// fleet runs the worker processes of a run.
type fleet struct {
	bin     string
	args    []string // flags common to every worker
	oddArgs []string // flags of the workers of odd slots only, after args
	urls    []string // by slot: each slot reaches the database through its own proxy
	logDir  string
	rec     *recorder
	restart time.Duration // delay before a crashed worker is started again

	mu       sync.Mutex
	vt       time.Duration // the visibility timeout of workers started from now on
	current  []*proc       // by slot
	extra    []*proc       // started outside the slots (startExtra)
	all      []*proc
	crashes  []string
	stopping bool
	wg       sync.WaitGroup // the waiter goroutines
}

func newFleet(bin, logDir string, urls []string, vt time.Duration, args []string, rec *recorder) *fleet {
	return &fleet{bin: bin, args: args, urls: urls, vt: vt, logDir: logDir, rec: rec, restart: 500 * time.Millisecond,
		current: make([]*proc, len(urls))}
}

// setVisibilityTimeout makes workers started from now on use vt.
func (f *fleet) setVisibilityTimeout(vt time.Duration) {
	f.mu.Lock()
	f.vt = vt
	f.mu.Unlock()
}

// start starts a new generation in slot. The caller holds no lock.
func (f *fleet) start(slot int) (*proc, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.startLocked(slot)
}

func (f *fleet) startLocked(slot int) (*proc, error) {
	if f.stopping {
		return nil, errors.New("chaos: the fleet is stopping")
	}
	gen := 0
	if old := f.current[slot]; old != nil {
		gen = old.gen + 1
	}
	p := &proc{slot: slot, gen: gen, id: fmt.Sprintf("w%d-g%d", slot, gen), done: make(chan struct{})}
	var extra []string
	if slot%2 == 1 {
		extra = f.oddArgs
	}
	if err := f.launchLocked(p, f.urls[slot], extra); err != nil {
		return nil, err
	}
	f.current[slot] = p
	return p, nil
}

// startExtra starts a worker outside the slots, which no kill, deploy or restart after a
// crash reaches: id is its worker id, url its connection string, and args are passed
// after the common flags (the last of a flag given twice wins). Its starter ends it with
// stopExtra; stop ends it too.
func (f *fleet) startExtra(id, url string, args []string) (*proc, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopping {
		return nil, errors.New("chaos: the fleet is stopping")
	}
	p := &proc{slot: -1, id: id, done: make(chan struct{})}
	if err := f.launchLocked(p, url, args); err != nil {
		return nil, err
	}
	f.extra = append(f.extra, p)
	return p, nil
}

// launchLocked starts p's process with the common flags and extra, and its waiter. f.mu
// is held.
func (f *fleet) launchLocked(p *proc, url string, extra []string) error {
	p.log = filepath.Join(f.logDir, p.id+".log")
	p.ends = filepath.Join(f.logDir, p.id+".ends")
	logFile, err := os.Create(p.log)
	if err != nil {
		return fmt.Errorf("chaos: worker log: %w", err)
	}
	args := []string{"-id", p.id, "-url", url, "-visibility-timeout", f.vt.String(), "-ends", p.ends}
	args = append(append(args, f.args...), extra...)
	p.cmd = exec.Command(f.bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	setProcAttr(p.cmd)
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("chaos: starting worker %s: %w", p.id, err)
	}
	logFile.Close() // the child has its own descriptor
	p.pid = p.cmd.Process.Pid
	f.all = append(f.all, p)
	f.wg.Add(1)
	go f.wait(p)
	return nil
}

// stopExtra ends p, started by startExtra, gracefully: SIGTERM, then SIGKILL after grace.
func (f *fleet) stopExtra(p *proc, grace time.Duration) {
	f.mu.Lock()
	p.expected = true
	f.mu.Unlock()
	_ = signalGroup(p.pid, syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		f.mu.Lock()
		p.killed, p.killAt = true, time.Now().Round(0)
		f.mu.Unlock()
		f.rec.logf("worker %s (pid %d) did not stop within %s of SIGTERM; killed", p.id, p.pid, grace)
		_ = signalGroup(p.pid, syscall.SIGKILL)
		<-p.done
	}
}

// wait reaps p and restarts its slot if p died on its own: that is a crash, which the
// report counts.
func (f *fleet) wait(p *proc) {
	defer f.wg.Done()
	p.err = p.cmd.Wait()
	p.exitAt = time.Now().Round(0)
	close(p.done)
	f.mu.Lock()
	defer f.mu.Unlock()
	if p.expected {
		return
	}
	f.crashes = append(f.crashes, fmt.Sprintf("%s (pid %d): %v, log %s", p.id, p.pid, p.err, p.log))
	f.rec.logf("worker %s (pid %d) exited on its own: %v (log %s); starting a new one", p.id, p.pid, p.err, p.log)
	if f.stopping || p.slot < 0 || f.current[p.slot] != p {
		return
	}
	f.wg.Add(1) // legal: this goroutine's own Done is still pending
	go func() {
		defer f.wg.Done()
		time.Sleep(f.restart)
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.current[p.slot] == p && !f.stopping {
			if _, err := f.startLocked(p.slot); err != nil {
				f.rec.logf("restarting worker slot %d failed: %v", p.slot, err)
			}
		}
	}()
}

// kill sends SIGKILL to the current process of slot, waits until it is gone, and returns
// it and the time it was known dead.
func (f *fleet) kill(ctx context.Context, slot int) (*proc, time.Time, error) {
	f.mu.Lock()
	p := f.current[slot]
	if p == nil {
		f.mu.Unlock()
		return nil, time.Time{}, fmt.Errorf("chaos: no worker in slot %d", slot)
	}
	p.expected = true
	p.killed = true
	p.killAt = time.Now().Round(0)
	f.mu.Unlock()
	if err := signalGroup(p.pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return p, time.Time{}, fmt.Errorf("chaos: kill -9 worker %s (pid %d): %w", p.id, p.pid, err)
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		return p, time.Time{}, ctx.Err()
	}
	return p, p.exitAt, nil
}

// redeploy stops the current process of slot gracefully (SIGTERM; SIGKILL after grace)
// and starts a new generation in it, as a rolling deploy does. It returns both.
func (f *fleet) redeploy(ctx context.Context, slot int, grace time.Duration) (old, np *proc, err error) {
	f.mu.Lock()
	p := f.current[slot]
	if p == nil {
		f.mu.Unlock()
		return nil, nil, fmt.Errorf("chaos: no worker in slot %d", slot)
	}
	p.expected = true
	f.mu.Unlock()
	_ = signalGroup(p.pid, syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		// Not stopped within grace: the deploy kills it, and its handlers still at work
		// are cut off by a kill like any other.
		f.mu.Lock()
		p.killed, p.killAt = true, time.Now().Round(0)
		f.mu.Unlock()
		f.rec.logf("deploy: worker %s (pid %d) did not stop within %s of SIGTERM; killed", p.id, p.pid, grace)
		_ = signalGroup(p.pid, syscall.SIGKILL)
		<-p.done
	case <-ctx.Done():
		return p, nil, ctx.Err()
	}
	np, err = f.start(slot)
	return p, np, err
}

// stop ends every worker: SIGTERM, then SIGKILL for those still running after grace.
// It may be called more than once.
func (f *fleet) stop(grace time.Duration) {
	f.mu.Lock()
	f.stopping = true
	var live []*proc
	for _, p := range append(f.current[:len(f.current):len(f.current)], f.extra...) {
		if p == nil {
			continue
		}
		select {
		case <-p.done:
			continue
		default:
		}
		p.expected = true
		live = append(live, p)
	}
	f.mu.Unlock()
	for _, p := range live {
		_ = signalGroup(p.pid, syscall.SIGTERM)
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	expired := false
	for _, p := range live {
		if !expired {
			select {
			case <-p.done:
				continue
			case <-timer.C:
				expired = true
			}
		}
		_ = signalGroup(p.pid, syscall.SIGKILL)
		<-p.done
	}
	// The group may hold children of a worker that outlived it; take them too.
	for _, p := range live {
		_ = signalGroup(p.pid, syscall.SIGKILL)
	}
	f.wg.Wait()
}

// slotsByID maps the id of each slot's current worker to its slot.
func (f *fleet) slotsByID() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := make(map[string]int, len(f.current))
	for slot, p := range f.current {
		if p != nil {
			m[p.id] = slot
		}
	}
	return m
}

// crashList returns the workers that exited without being told to.
func (f *fleet) crashList() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.crashes...)
}

// procs returns every worker process that ran, in start order.
func (f *fleet) procs() []*proc {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*proc(nil), f.all...)
}

// currentProc returns the current process of slot (nil when none).
func (f *fleet) currentProc(slot int) *proc {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.current[slot]
}
