//go:build !unix

package chaos

import (
	"errors"
	"os/exec"
	"syscall"
)

func setProcAttr(*exec.Cmd) {}

// signalGroup is not supported outside unix: the harness kills workers with SIGKILL, which
// only unix has.
func signalGroup(int, syscall.Signal) error {
	return errors.New("chaos: killing worker processes needs a unix system")
}

func setDetachedAttr(*exec.Cmd) {}

func pauseProcess(int) error {
	return errors.New("chaos: pausing a process needs a unix system")
}

func resumeProcess(int) error {
	return errors.New("chaos: resuming a process needs a unix system")
}
