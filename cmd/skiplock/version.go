package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// versionCommand is `skiplock version`.
func versionCommand() *command {
	return &command{
		name:    "version",
		summary: "print the build's version",
		help:    "Prints the version of the build and of Go. It needs no database.",
		run:     cmdVersion,
	}
}

// skiplockModule is the module whose version `skiplock version` prints.
const skiplockModule = "github.com/skiplock/skiplock"

// buildVersion returns the version of the skiplock module in the build described by bi, as
// the go command recorded it: "v0.1.0" after `go install .../cmd/skiplock@v0.1.0`, a
// pseudo-version for a build from a commit, "(devel)" when the build names none (go run,
// -buildvcs=false, or bi nil: no build info). The build info's main module is the module
// of the main package, so for this command it is skiplock however it is built, also when
// built inside another module that requires skiplock (the version is then the required
// one). When the version does not already name the build's commit, the commit (and +dirty
// for a modified tree) is added.
//
// The library's own lookup (moduleVersion in the root package, for a service's logs) also
// searches the dependencies: there the main package is the service's.
func buildVersion(bi *debug.BuildInfo) string {
	const devel = "(devel)"
	if bi == nil || bi.Main.Path != skiplockModule {
		return devel
	}
	v := bi.Main.Version
	if v == "" {
		v = devel
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch {
		case s.Key == "vcs.revision":
			rev = s.Value[:min(len(s.Value), 12)]
		case s.Key == "vcs.modified" && s.Value == "true":
			dirty = "+dirty"
		}
	}
	if rev != "" && !strings.Contains(v, rev) {
		v += " " + rev + dirty
	}
	return v
}

// cmdVersion prints the skiplock module's version from the build info, and the Go version.
func cmdVersion(_ context.Context, a *app, _ *options) error {
	bi, _ := debug.ReadBuildInfo() // nil without build info: buildVersion says (devel)
	_, err := fmt.Fprintf(a.stdout, "skiplock %s (%s)\n", buildVersion(bi), runtime.Version())
	return err
}
