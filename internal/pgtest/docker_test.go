package pgtest_test

import (
	"net"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/pgtest"
)

// Step 4 builds dockerpg only when a Docker socket is there; without one it fails at
// once, naming where it looked.
func TestAnySocket_FindsADockerSocketOrSaysWhereItLooked(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	missing := []string{filepath.Join(dir, "a.sock"), filepath.Join(dir, "b.sock")}
	err := pgtest.AnySocket(missing)
	require.Error(t, err)
	assert.Contains(t, err.Error(), missing[0])
	assert.Contains(t, err.Error(), "DOCKER_HOST")

	l, err := net.Listen("unix", missing[1])
	require.NoError(t, err)
	defer l.Close()
	assert.NoError(t, pgtest.AnySocket(missing))
}
