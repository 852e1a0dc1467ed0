//go:build !unix

package pgtest

import (
	"errors"
	"os/exec"
)

// osUser is never used outside unix, where processes do not run as root.
type osUser struct {
	name     string
	uid, gid int
}

func unprivilegedUser() (*osUser, error) { return nil, nil }

func setUser(*exec.Cmd, *osUser, bool) error { return nil }

func checkReachable(string, *osUser) error {
	return errors.New("pgtest: running the server as another user needs a unix system")
}
