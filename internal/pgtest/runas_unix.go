//go:build unix

package pgtest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
)

// osUser is the unprivileged user that runs initdb, pg_ctl and postgres when we are root.
type osUser struct {
	name     string
	uid, gid int
	groups   []int // supplementary groups, as `setpriv --init-groups` would set them
}

// serverUsers are tried in order when the process is root; postgres refuses to run as root.
var serverUsers = []string{"postgres", "nobody"}

// unprivilegedUser returns the user to run the server as, or nil when we are not root (the
// server then runs as us).
func unprivilegedUser() (*osUser, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range serverUsers {
		u, err := user.Lookup(name)
		var unknown user.UnknownUserError
		if errors.As(err, &unknown) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("pgtest: cannot look up user %s: %w", name, err)
		}
		ou := &osUser{name: name}
		if ou.uid, err = strconv.Atoi(u.Uid); err != nil {
			return nil, fmt.Errorf("pgtest: user %s has uid %q: %w", name, u.Uid, err)
		}
		if ou.gid, err = strconv.Atoi(u.Gid); err != nil {
			return nil, fmt.Errorf("pgtest: user %s has gid %q: %w", name, u.Gid, err)
		}
		gids, _ := u.GroupIds() // without them the user keeps only its primary group
		for _, g := range gids {
			if n, err := strconv.Atoi(g); err == nil {
				ou.groups = append(ou.groups, n)
			}
		}
		return ou, nil
	}
	return nil, fmt.Errorf("pgtest: running as root, and neither user %q nor %q exists to run postgres (which refuses root): create one (useradd --system postgres) or run the tests as a non-root user", serverUsers[0], serverUsers[1])
}

// setUser makes cmd run as u (nothing when u is nil) and, if newGroup, in a process group of
// its own so that a Ctrl-C meant for the test process does not reach it.
func setUser(cmd *exec.Cmd, u *osUser, newGroup bool) error {
	attr := &syscall.SysProcAttr{Setpgid: newGroup}
	if u != nil {
		cred := &syscall.Credential{Uid: uint32(u.uid), Gid: uint32(u.gid)}
		for _, g := range u.groups {
			cred.Groups = append(cred.Groups, uint32(g))
		}
		attr.Credential = cred
		cmd.Env = append(cmd.Env, "HOME="+cmd.Dir, "USER="+u.name, "LOGNAME="+u.name)
	}
	cmd.SysProcAttr = attr
	return nil
}

// checkReachable reports an error unless u may search (x permission) every parent of dir,
// which it must to run a cluster inside it.
func checkReachable(dir string, u *osUser) error {
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("pgtest: cannot check %s: %w", p, err)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if ok && !canSearch(fi.Mode(), int(st.Uid), int(st.Gid), u) {
			return fmt.Errorf("pgtest: user %s, who runs postgres because it refuses root, cannot reach %s: %s has mode %04o and uid %d; use a directory under %s whose parents are mode 0755, or chmod o+x %s",
				u.name, dir, p, fi.Mode().Perm(), st.Uid, os.TempDir(), p)
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

func canSearch(mode os.FileMode, uid, gid int, u *osUser) bool {
	switch {
	case uid == u.uid:
		return mode&0o100 != 0
	case gid == u.gid || slices.Contains(u.groups, gid):
		return mode&0o010 != 0
	default:
		return mode&0o001 != 0
	}
}
