//go:build unix && !linux

package pgbouncer

import "syscall"

// setParentDeathSignal does nothing where the kernel has no parent-death signal: a test
// process killed without cleanups leaves its pgbouncer running.
func setParentDeathSignal(*syscall.SysProcAttr) {}
