//go:build unix

package pgbouncer

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"syscall"
)

// osUser is the unprivileged user pgbouncer runs as when we are root.
type osUser struct {
	name     string
	uid, gid int
}

// users are tried in order when the process is root: pgbouncer refuses to run as root.
var users = []string{"postgres", "nobody"}

// unprivilegedUser returns the user to run pgbouncer as, or nil when we are not root.
func unprivilegedUser() (*osUser, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range users {
		u, err := user.Lookup(name)
		var unknown user.UnknownUserError
		if errors.As(err, &unknown) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("pgbouncer: cannot look up user %s: %w", name, err)
		}
		uid, err1 := strconv.Atoi(u.Uid)
		gid, err2 := strconv.Atoi(u.Gid)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("pgbouncer: user %s: %w", name, err)
		}
		return &osUser{name: name, uid: uid, gid: gid}, nil
	}
	return nil, fmt.Errorf("pgbouncer: running as root, and neither user %q nor %q exists to run pgbouncer (which refuses root): create one (useradd --system postgres) or run the tests as a non-root user", users[0], users[1])
}

// setUser makes cmd run as u (nothing when u is nil), in a process group of its own so that
// a Ctrl-C meant for the test process does not reach it before its cleanup does.
func setUser(cmd *exec.Cmd, u *osUser) {
	attr := &syscall.SysProcAttr{Setpgid: true}
	if u != nil {
		attr.Credential = &syscall.Credential{Uid: uint32(u.uid), Gid: uint32(u.gid)}
		cmd.Env = append(cmd.Env, "HOME="+cmd.Dir, "USER="+u.name, "LOGNAME="+u.name)
	}
	setParentDeathSignal(attr)
	cmd.SysProcAttr = attr
}

// chownTo hands path to u, who must read it; nothing when u is nil.
func chownTo(path string, u *osUser) error {
	if u == nil {
		return nil
	}
	if err := os.Chown(path, u.uid, u.gid); err != nil {
		return fmt.Errorf("pgbouncer: cannot hand %s to user %s, who runs pgbouncer because it refuses root: %w", path, u.name, err)
	}
	return nil
}
