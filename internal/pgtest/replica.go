package pgtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"
)

// Limits of the replication tools.
const (
	// basebackupTimeout bounds copying a (small, throwaway) primary with pg_basebackup.
	basebackupTimeout = 2 * time.Minute
	// streamingTimeout bounds how long StartStandby waits for the primary to see the
	// standby streaming.
	streamingTimeout = 30 * time.Second
	// killTimeout bounds how long Kill waits for the killed processes to be gone.
	killTimeout = 10 * time.Second
)

// StartStandby makes a streaming standby of primary in dir with pg_basebackup -R (a copy
// of the primary's data directory that connects back to it for WAL, through 127.0.0.1 as
// user postgres), starts it as StartCluster does and returns once the primary reports it
// streaming. opts.Settings are added to the standby's own settings, which override the
// copied ones; for a primary with synchronous_standby_names set, give the standby
// {"synchronous_standby_names": ""} or, once promoted, it waits for a standby of its own
// on every commit.
//
// The standby is a hot standby: it accepts read-only connections. [Cluster.Promote]
// turns it into a primary. It costs a fast checkpoint on the primary and a copy of its
// data directory (a few tens of MB for a fresh cluster).
func StartStandby(ctx context.Context, primary *Cluster, dir string, opts ClusterOptions) (*Cluster, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("pgtest: standby directory: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("pgtest: cannot create standby directory: %w", err)
	}
	if primary.runAs != nil {
		if err := checkReachable(dir, primary.runAs); err != nil {
			return nil, err
		}
		if err := os.Chown(dir, primary.runAs.uid, primary.runAs.gid); err != nil {
			return nil, fmt.Errorf("pgtest: cannot hand %s to user %s: %w", dir, primary.runAs.name, err)
		}
	}
	// A Cluster value only to run pg_basebackup as the right user in the right place.
	tmp := &Cluster{Dir: dir, DataDir: filepath.Join(dir, dataSubdir), BinDir: primary.BinDir, runAs: primary.runAs}
	bctx, cancel := context.WithTimeout(ctx, basebackupTimeout)
	defer cancel()
	// -c fast: do not wait for a spread checkpoint; -X stream: the WAL of the copy comes
	// along; -R: standby.signal and primary_conninfo, so that it starts as a standby.
	err = tmp.run(bctx, "pg_basebackup", "-D", tmp.DataDir, "-h", "127.0.0.1", "-p", fmt.Sprint(primary.Port),
		"-U", "postgres", "-c", "fast", "-X", "stream", "-R", "--no-sync")
	if err != nil {
		return nil, fmt.Errorf("pgtest: cannot copy the primary on port %d: %w (its pg_hba.conf must allow replication connections from 127.0.0.1, as initdb's default does)", primary.Port, err)
	}
	standby, err := StartCluster(ctx, dir, opts)
	if err != nil {
		return nil, err
	}
	if err := primary.waitStreaming(ctx); err != nil {
		_ = standby.Stop(context.Background())
		return nil, err
	}
	return standby, nil
}

// waitStreaming waits until c reports a standby in state streaming.
func (c *Cluster) waitStreaming(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, streamingTimeout)
	defer cancel()
	for {
		n, err := c.countStreaming(ctx)
		if err == nil && n > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgtest: the primary on port %d saw no streaming standby within %v (last error: %v); see %s", c.Port, streamingTimeout, err, c.LogFile)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *Cluster) countStreaming(ctx context.Context) (int, error) {
	conn, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	var n int
	err = conn.QueryRow(ctx, `select count(*) from pg_stat_replication where state = 'streaming'`).Scan(&n)
	return n, err
}

// Promote turns a standby into a primary with pg_ctl promote and returns once it accepts
// writes.
func (c *Cluster) Promote(ctx context.Context) error {
	if err := c.pgctl(ctx, "promote", "-w", "-t", seconds(readyTimeout)); err != nil {
		return fmt.Errorf("pgtest: cannot promote the standby in %s: %w\nserver log:\n%s", c.Dir, err, lastLines(c.logSince(0), 20))
	}
	return c.waitReady(ctx)
}

// Kill ends the server the way a lost machine would: the postmaster is stopped (so that it
// forks nothing more), then it and every process it started (backends, WAL sender, writer,
// checkpointer) get SIGKILL at once, and Kill returns when they are all gone. Nothing is
// flushed or shut down; what was committed stays on disk, and [Cluster.Restart] starts the
// server again with crash recovery. Killing a server that is not running does nothing.
//
// It needs the right to signal the server's processes (root, or the user running them).
// On systems without /proc the postmaster alone is killed, and its children end when they
// notice its death.
func (c *Cluster) Kill(ctx context.Context) error {
	pid := c.PID()
	if pid == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, killTimeout)
	defer cancel()
	if err := killTree(ctx, pid); err != nil {
		return fmt.Errorf("pgtest: cannot kill the cluster in %s: %w", c.Dir, err)
	}
	return nil
}
