package main

import (
	"archive/zip"
	"context"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestVersion_FromBuildInfo(t *testing.T) {
	t.Parallel()
	const rev = "023d31e12345abcdef0123456789abcdef012345"
	vcs := func(modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}
	}
	service := debug.Module{Path: "example.com/ops", Version: "(devel)"}
	tests := []struct {
		name string
		bi   *debug.BuildInfo
		want string
	}{
		{"go install @v0.1.0",
			&debug.BuildInfo{Main: debug.Module{Path: skiplockModule, Version: "v0.1.0"}}, "v0.1.0"},
		{"go build in a clean checkout: the pseudo-version names the commit once",
			&debug.BuildInfo{Main: debug.Module{Path: skiplockModule, Version: "v0.1.1-0.20261201004459-023d31e12345"}, Settings: vcs("false")},
			"v0.1.1-0.20261201004459-023d31e12345"},
		{"go build in a modified checkout",
			&debug.BuildInfo{Main: debug.Module{Path: skiplockModule, Version: "v0.1.1-0.20261201004459-023d31e12345+dirty"}, Settings: vcs("true")},
			"v0.1.1-0.20261201004459-023d31e12345+dirty"},
		{"no version but a commit",
			&debug.BuildInfo{Main: debug.Module{Path: skiplockModule, Version: "(devel)"}, Settings: vcs("true")},
			"(devel) 023d31e12345+dirty"},
		{"go run: no version, no commit",
			&debug.BuildInfo{Main: debug.Module{Path: skiplockModule, Version: "(devel)"}}, "(devel)"},
		{"main package of another module (not this command)",
			&debug.BuildInfo{Main: service, Deps: []*debug.Module{{Path: skiplockModule, Version: "v0.3.2"}}}, "(devel)"},
		{"no build info", nil, "(devel)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tt.want, buildVersion(tt.bi))
		})
	}
}

// fakeVersion is the version the tests publish this checkout under, on a proxy of their own.
const fakeVersion = "v0.42.0"

// TestVersion_BinaryPrintsItsBuildInfo publishes this checkout as skiplock fakeVersion on a
// module proxy in a temporary folder, then builds the command the two ways a user does
// and checks that `skiplock version` prints what `go version -m` reads from the binary:
// installed with `go install .../cmd/skiplock@version`, and built inside another module
// that requires skiplock (the build info's main module is still skiplock, the module of
// the main package, at the required version). Nothing is downloaded: the other modules
// come from the local module cache's download folder, and the test's module cache is
// temporary, so the fake version never lands in yours.
func TestVersion_BinaryPrintsItsBuildInfo(t *testing.T) {
	t.Parallel()
	goTool, err := exec.LookPath("go")
	require.NoError(t, err, "the go command must be on PATH to build the binary")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	goEnv := func(key string) string {
		out, err := exec.CommandContext(ctx, goTool, "env", key).Output()
		require.NoError(t, err, "go env %s", key)
		return strings.TrimSpace(string(out))
	}
	realCache := goEnv("GOMODCACHE")
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)

	tmp := t.TempDir()
	proxy := filepath.Join(tmp, "proxy")
	publish(t, repo, proxy, fakeVersion)
	env := []string{
		"GOPROXY=" + fileURL(proxy) + "," + fileURL(filepath.Join(realCache, "cache", "download")),
		"GOMODCACHE=" + filepath.Join(tmp, "modcache"),
		"GOFLAGS=-modcacherw", // so t.TempDir can remove the module cache
		"GOSUMDB=off", "GONOSUMDB=", "GOPRIVATE=", "GONOPROXY=", "GOWORK=off", "GOTOOLCHAIN=local",
		"GOBIN=" + filepath.Join(tmp, "bin"),
	}
	goCmd := func(dir string, args ...string) string {
		cmd := exec.CommandContext(ctx, goTool, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), env...) // later entries win
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go %s: %s", strings.Join(args, " "), out)
		return string(out)
	}

	t.Run("go install @version", func(t *testing.T) {
		goCmd(tmp, "install", skiplockModule+"/cmd/skiplock@"+fakeVersion)
		checkVersionOutput(t, goCmd, filepath.Join(tmp, "bin", "skiplock"))
	})
	t.Run("built inside a module that requires skiplock", func(t *testing.T) {
		svc := filepath.Join(tmp, "ops")
		require.NoError(t, os.MkdirAll(svc, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(svc, "go.mod"),
			[]byte("module example.com/ops\n\ngo 1.26.0\n\nrequire "+skiplockModule+" "+fakeVersion+"\n"), 0o644))
		bin := filepath.Join(tmp, "ops-skiplock")
		goCmd(svc, "build", "-mod=mod", "-o", bin, skiplockModule+"/cmd/skiplock")
		checkVersionOutput(t, goCmd, bin)
	})
}

// checkVersionOutput runs `bin version` and checks that it prints fakeVersion and the Go
// version, as `go version -m bin` reads them.
func checkVersionOutput(t *testing.T, goCmd func(dir string, args ...string) string, bin string) {
	t.Helper()
	info := goCmd(filepath.Dir(bin), "version", "-m", bin)
	// "<file>: go1.x.y", then tab-separated lines: "path <main package>", "mod <main
	// module> <version> [<sum>]", "dep <path> <version> <sum>", "build <key>=<value>".
	header, rest, _ := strings.Cut(info, "\n")
	_, goVersion, ok := strings.Cut(header, ": ")
	require.True(t, ok, "go version -m header: %q", header)
	var recorded string
	for line := range strings.Lines(rest) {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "mod" && f[1] == skiplockModule {
			recorded = f[2]
		}
	}
	require.Equal(t, fakeVersion, recorded, "go version -m:\n%s", info)

	out, err := exec.Command(bin, "version").Output()
	require.NoError(t, err, "skiplock version")
	assert.Equal(t, "skiplock "+recorded+" ("+strings.TrimSpace(goVersion)+")\n", string(out), "go version -m:\n%s", info)
}

// publish writes the root module of the checkout at repo to a GOPROXY folder as version v:
// its go.mod, go.sum, LICENSE and every non-test .go and .sql file, leaving out nested
// modules (folders with a go.mod of their own).
func publish(t *testing.T, repo, proxy, v string) {
	t.Helper()
	dir := filepath.Join(proxy, filepath.FromSlash(skiplockModule), "@v")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	gomod, err := os.ReadFile(filepath.Join(repo, "go.mod"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, v+".mod"), gomod, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, v+".info"), []byte(`{"Version":"`+v+`","Time":"2026-12-01T00:00:00Z"}`), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "list"), []byte(v+"\n"), 0o644))

	f, err := os.Create(filepath.Join(dir, v+".zip"))
	require.NoError(t, err)
	defer f.Close()
	zw := zip.NewWriter(f)
	files := 0
	err = filepath.WalkDir(repo, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(repo, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			if rel == "." {
				return nil
			}
			if strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // a nested module
			}
			return nil
		}
		name := d.Name()
		// Every file the module ships (embedded SQL, templates, static assets, ...), but
		// not tests: they are not needed to build, and some are large.
		keep := !strings.HasSuffix(name, "_test.go")
		if !keep || !d.Type().IsRegular() {
			return nil
		}
		body, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		w, err := zw.Create(skiplockModule + "@" + v + "/" + filepath.ToSlash(rel))
		if err != nil {
			return err
		}
		files++
		_, err = w.Write(body)
		return err
	})
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	require.Greater(t, files, 10, "too few files found in %s for the module", repo)
}

// fileURL is the file:// URL of a local folder, as GOPROXY takes it.
func fileURL(dir string) string {
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(dir)}).String()
}
