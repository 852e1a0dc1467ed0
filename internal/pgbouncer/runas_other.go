//go:build !unix

package pgbouncer

import "os/exec"

// osUser is never used outside unix, where processes do not run as root.
type osUser struct{}

func unprivilegedUser() (*osUser, error) { return nil, nil }

func setUser(*exec.Cmd, *osUser) {}

func chownTo(string, *osUser) error { return nil }
