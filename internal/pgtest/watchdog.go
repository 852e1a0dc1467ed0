package pgtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

// watchdogScript waits for EOF on its stdin, which comes when the test process exits (the
// kernel closes the write end we hold), then stops the cluster and removes its directory.
// $0 is pg_ctl, $1 the data directory, $2 the cluster directory.
const watchdogScript = `cat >/dev/null; "$0" stop -s -D "$1" -m immediate -w -t 30 >/dev/null 2>&1; rm -rf "$2"`

// watchdogPipes holds the write ends of the watchdogs' stdin for the life of the process:
// dropping one would let its finalizer close it and stop the cluster early.
var watchdogPipes struct {
	sync.Mutex
	w []*os.File
}

// stopAtExit starts a watchdog process that stops c and removes c.Dir once this process has
// exited, however it exits. The watchdog runs as the server's user, in its own process group.
func (c *Cluster) stopAtExit() error {
	r, w, err := os.Pipe() // both ends close-on-exec: only the watchdog inherits r
	if err != nil {
		return fmt.Errorf("pgtest: cannot start the cluster watchdog: %w", err)
	}
	defer r.Close()
	cmd := exec.Command("/bin/sh", "-c", watchdogScript, filepath.Join(c.BinDir, "pg_ctl"), c.DataDir, c.Dir)
	cmd.Stdin = r
	cmd.Dir = "/"
	cmd.Env = serverEnv()
	if err := setUser(cmd, c.runAs, true); err != nil {
		w.Close()
		return err
	}
	if err := cmd.Start(); err != nil {
		w.Close()
		return fmt.Errorf("pgtest: cannot start the cluster watchdog (/bin/sh): %w", err)
	}
	// The watchdog outlives us by design, so nobody waits for it.
	_ = cmd.Process.Release()
	watchdogPipes.Lock()
	watchdogPipes.w = append(watchdogPipes.w, w)
	watchdogPipes.Unlock()
	return nil
}

// startThrowaway starts a cluster in a new directory under os.TempDir that lives until the
// test process exits: step 3 of URL.
func startThrowaway(ctx context.Context) (*Cluster, error) {
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, fmt.Errorf("pgtest: cannot create a directory for a throwaway cluster: %w", err)
	}
	c, err := StartCluster(ctx, dir, ClusterOptions{})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	if err := c.stopAtExit(); err != nil {
		_ = c.Stop(ctx)
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return c, nil
}
