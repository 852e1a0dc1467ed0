package pgbouncer

import "syscall"

// setParentDeathSignal makes the kernel stop pgbouncer if the test process dies without
// running its cleanups.
func setParentDeathSignal(attr *syscall.SysProcAttr) { attr.Pdeathsig = syscall.SIGTERM }
