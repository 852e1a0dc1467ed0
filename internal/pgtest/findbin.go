package pgtest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// debianBinGlob is where Debian and Ubuntu install server binaries, one directory per major
// version, none of them on PATH.
const debianBinGlob = "/usr/lib/postgresql/*/bin"

// FindBin returns the path of a PostgreSQL program such as "initdb", "pg_ctl" or "postgres":
// the one on PATH if there is one, else the one of the highest version under
// /usr/lib/postgresql/*/bin. The error says how to install it.
func FindBin(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	dirs, _ := filepath.Glob(debianBinGlob) // the pattern is valid, so no error
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, dir := range dirs {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("pgtest: %s not found on PATH or under %s: install the PostgreSQL server (apt-get install postgresql), or add the bin directory of an installed one to PATH", name, debianBinGlob)
}

// versionOf reads the major version out of /usr/lib/postgresql/<version>/bin; unknown is -1.
func versionOf(binDir string) float64 {
	v, err := strconv.ParseFloat(filepath.Base(filepath.Dir(binDir)), 64)
	if err != nil {
		return -1
	}
	return v
}

// serverBinDir returns the directory of pg_ctl with its symlinks resolved, checking that
// initdb and postgres of the same installation sit next to it. pg_ctl runs the postgres of
// its own directory, so initdb must come from there too or the versions could differ.
func serverBinDir() (string, error) {
	pgctl, err := FindBin("pg_ctl")
	if err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(pgctl)
	if err != nil {
		return "", fmt.Errorf("pgtest: cannot resolve %s: %w", pgctl, err)
	}
	dir := filepath.Dir(real)
	var missing []string
	for _, name := range []string{"initdb", "postgres"} {
		if _, err := os.Stat(filepath.Join(dir, name)); errors.Is(err, os.ErrNotExist) {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("pgtest: %s has pg_ctl but not %s: install the complete PostgreSQL server package (apt-get install postgresql)", dir, strings.Join(missing, " or "))
	}
	return dir, nil
}
