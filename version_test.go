package skiplock

import (
	"bufio"
	"io/fs"
	"os"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/migrations"
)

func TestModuleVersion_FromBuildInfo(t *testing.T) {
	t.Parallel()
	const placeholder = "v0.0.0-00010101000000-000000000000" // what a require next to a directory replace says
	service := debug.Module{Path: "example.com/shop", Version: "(devel)"}
	tests := []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"main module, release",
			debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: "v0.1.0"}}, "v0.1.0"},
		{"main module, a commit after a release",
			debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: "v0.1.1-0.20261201004459-023d31e12345+dirty"}},
			"v0.1.1-0.20261201004459-023d31e12345+dirty"},
		{"main module, go run or go test",
			debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: "(devel)"}}, "(devel)"},
		{"main module, no version",
			debug.BuildInfo{Main: debug.Module{Path: modulePath}}, "(devel)"},
		{"dependency, release",
			debug.BuildInfo{Main: service, Deps: []*debug.Module{
				{Path: "github.com/jackc/pgx/v5", Version: "v5.12.0"},
				{Path: modulePath, Version: "v0.2.3"},
			}}, "v0.2.3"},
		{"dependency, pseudo-version",
			debug.BuildInfo{Main: service, Deps: []*debug.Module{
				{Path: modulePath, Version: "v0.2.4-0.20270101120000-abcdefabcdef"},
			}}, "v0.2.4-0.20270101120000-abcdefabcdef"},
		{"dependency replaced by a directory",
			debug.BuildInfo{Main: service, Deps: []*debug.Module{
				{Path: modulePath, Version: placeholder, Replace: &debug.Module{Path: "../skiplock"}},
			}}, "(devel)"},
		{"dependency replaced by a fork's release",
			debug.BuildInfo{Main: service, Deps: []*debug.Module{
				{Path: modulePath, Version: "v0.2.0", Replace: &debug.Module{Path: "example.com/fork/skiplock", Version: "v0.2.1"}},
			}}, "v0.2.1"},
		{"a module whose path only starts like ours",
			debug.BuildInfo{Main: service, Deps: []*debug.Module{
				{Path: modulePath + "/otel", Version: "v0.9.0"},
			}}, "(devel)"},
		{"not in the build",
			debug.BuildInfo{Main: service}, "(devel)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tt.want, versionFromBuildInfo(&tt.bi))
		})
	}
}

// TestModuleVersion_ThisBinary checks that modulePath is the path go.mod declares, so the
// lookup finds this module in real build info, and that moduleVersion reads this test
// binary's own build info, where skiplock is the main module.
func TestModuleVersion_ThisBinary(t *testing.T) {
	t.Parallel()
	f, err := os.Open("go.mod")
	require.NoError(t, err)
	defer f.Close()
	var declared string
	for sc := bufio.NewScanner(f); sc.Scan(); {
		if p, ok := strings.CutPrefix(sc.Text(), "module "); ok {
			declared = strings.TrimSpace(p)
			break
		}
	}
	require.Equal(t, declared, modulePath, "modulePath must match go.mod's module line")

	bi, ok := debug.ReadBuildInfo()
	require.True(t, ok, "test binaries carry build info")
	require.Equal(t, modulePath, bi.Main.Path)
	want := bi.Main.Version
	if want == "" {
		want = "(devel)"
	}
	assert.Equal(t, want, moduleVersion())
}

// TestChangelog_NamesEveryMigration fails as soon as a migration file exists that
// CHANGELOG.md does not name: users must learn from the changelog which upgrade needs
// Migrate before its workers are deployed.
func TestChangelog_NamesEveryMigration(t *testing.T) {
	t.Parallel()
	changelog, err := os.ReadFile("CHANGELOG.md")
	require.NoError(t, err)
	require.Contains(t, string(changelog), "\n## [Unreleased]\n", "CHANGELOG.md must keep an Unreleased section for the next change")

	files, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	require.NotEmpty(t, files, "no migration files found in migrations.FS")
	// 001_jobs.up.sql and 001_jobs.down.sql are both migration 001_jobs.
	names := map[string]bool{}
	for _, file := range files {
		names[strings.TrimSuffix(strings.TrimSuffix(file, ".up.sql"), ".down.sql")] = true
	}
	for name := range names {
		// A whole word: 001_jobs does not count for 001_jobs_extra.
		named := regexp.MustCompile(`\b` + regexp.QuoteMeta(name) + `\b`)
		assert.Truef(t, named.Match(changelog),
			"migration %s (migrations/%s.up.sql) is not in CHANGELOG.md: name it under [Unreleased], saying what it changes and that Migrate must run before the new workers", name, name)
	}
}
