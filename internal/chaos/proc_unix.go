//go:build unix && !linux

package chaos

import (
	"os/exec"
	"syscall"
)

// setProcAttr puts a child in a process group of its own. Outside Linux there is no
// parent-death signal: a harness killed with SIGKILL leaves its workers running.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// signalGroup sends sig to the process group led by pid.
func signalGroup(pid int, sig syscall.Signal) error { return syscall.Kill(-pid, sig) }

// setDetachedAttr puts a child that must outlive the harness in a process group of its own.
func setDetachedAttr(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} }

// pauseProcess stops pid with SIGSTOP; a later SIGKILL (or SIGCONT) ends the pause.
func pauseProcess(pid int) error { return syscall.Kill(pid, syscall.SIGSTOP) }

// resumeProcess continues pid after pauseProcess (SIGCONT).
func resumeProcess(pid int) error { return syscall.Kill(pid, syscall.SIGCONT) }
