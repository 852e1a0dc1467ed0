//go:build unix

package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// killTree stops pid, sends SIGKILL to it and to its children, and waits until they are all
// gone. A process that has already exited is not an error.
func killTree(ctx context.Context, pid int) error {
	if !alive(pid) {
		return nil
	}
	// Stopped, it forks no more children while we list them.
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("SIGSTOP %d: %w", pid, err)
	}
	victims := append(childrenOf(pid), pid)
	for _, p := range victims {
		if err := syscall.Kill(p, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("SIGKILL %d: %w", p, err)
		}
	}
	for _, p := range victims {
		for alive(p) {
			select {
			case <-ctx.Done():
				return fmt.Errorf("process %d outlived SIGKILL: %w", p, ctx.Err())
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	return nil
}

// childrenOf lists the processes whose parent is pid, from /proc; nil where there is none.
// Linux lists a thread's children in one file, read at once, so that the kill follows the
// stop within a millisecond; otherwise every process's stat file is read.
func childrenOf(pid int) []int {
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid)); err == nil {
		var out []int
		for _, f := range bytes.Fields(b) {
			if n, err := strconv.Atoi(string(f)); err == nil {
				out = append(out, n)
			}
		}
		return out
	}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat") // the pattern is valid
	var out []int
	for _, f := range stats {
		_, ppid, ok := procStat(f)
		if ok && ppid == pid {
			if n, err := strconv.Atoi(filepath.Base(filepath.Dir(f))); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// alive reports whether pid exists and is not a zombie (an exited process nobody reaped
// yet: in a container whose init does not reap, orphans stay zombies).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	state, _, ok := procStat(fmt.Sprintf("/proc/%d/stat", pid))
	return !ok || state != 'Z'
}

// procStat reads the state and the parent pid from a /proc/<pid>/stat file.
func procStat(file string) (state byte, ppid int, ok bool) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, 0, false
	}
	// "pid (comm) state ppid ...": comm may hold spaces and parentheses, so cut at the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 2 || len(f[0]) != 1 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(string(f[1]))
	return f[0][0], ppid, err == nil
}
