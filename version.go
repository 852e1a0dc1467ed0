package skiplock

import "runtime/debug"

// modulePath is this module's path, as go.mod declares it and the build info names it.
const modulePath = "github.com/skiplock/skiplock"

// develVersion is the version reported when the build names none: a build from a checkout
// without version control information, go run, go test, or a binary without build info.
const develVersion = "(devel)"

// moduleVersion returns the version of the skiplock module this program was built with,
// read from the build info the go command embeds in every binary: "v0.1.0" for a release,
// a pseudo-version for a commit between releases, or "(devel)" when the build names none.
// It works whether skiplock is the program's main module (a binary built in this
// repository) or one of its dependencies (a service that imports skiplock).
func moduleVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return develVersion
	}
	return versionFromBuildInfo(bi)
}

// versionFromBuildInfo is moduleVersion for the build described by bi.
func versionFromBuildInfo(bi *debug.BuildInfo) string {
	if bi.Main.Path == modulePath {
		return orDevel(bi.Main.Version)
	}
	for _, d := range bi.Deps {
		if d.Path != modulePath {
			continue
		}
		if d.Replace != nil {
			// A replacement by a directory has no version of its own (the required one is
			// then often the placeholder v0.0.0-00010101000000-000000000000); a replacement
			// by another module version is the code that was built.
			return orDevel(d.Replace.Version)
		}
		return orDevel(d.Version)
	}
	return develVersion
}

func orDevel(v string) string {
	if v == "" {
		return develVersion
	}
	return v
}
