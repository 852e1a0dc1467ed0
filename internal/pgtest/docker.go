package pgtest

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	// containerTimeout bounds building dockerpg, pulling the image and starting the
	// container.
	containerTimeout = 6 * time.Minute
)

// startContainer starts a Postgres container for the rest of the test process and returns
// its URL. The container is started by dockerpg, a program in a module of its own beside
// this file (so that testcontainers-go stays out of skiplock's go.mod), run with `go run`
// and left running with a pipe on its stdin that only this process holds: when this
// process exits, however it exits, the pipe closes and dockerpg removes the container.
// It fails fast, without building anything, when no Docker engine can be reached.
func startContainer(tb testing.TB) (string, error) {
	tb.Helper()
	if err := dockerReachable(); err != nil {
		return "", err
	}
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("cannot find pgtest's source directory")
	}
	dir := filepath.Join(filepath.Dir(file), "dockerpg")
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return "", fmt.Errorf("cannot find the dockerpg module: %w", err)
	}
	stdinR, stdinW, err := os.Pipe() // both ends close-on-exec: only dockerpg inherits stdinR
	if err != nil {
		return "", err
	}
	defer stdinR.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		stdinW.Close()
		return "", err
	}
	defer outR.Close()
	// stderr goes to a file, not a Go writer: a writer would need a copying goroutine
	// that lives as long as dockerpg.
	errFile, err := os.CreateTemp("", "pgtest-dockerpg-*.log")
	if err != nil {
		stdinW.Close()
		outW.Close()
		return "", err
	}
	defer os.Remove(errFile.Name())
	defer errFile.Close()
	cmd := exec.Command("go", "run", ".", strconv.Itoa(defaultMaxConnections))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	cmd.Stdin, cmd.Stdout = stdinR, outW
	cmd.Stderr = errFile
	if err := cmd.Start(); err != nil {
		outW.Close()
		stdinW.Close()
		return "", fmt.Errorf("cannot run dockerpg (go run): %w", err)
	}
	outW.Close()
	// dockerpg outlives this call by design, so nobody waits for it; its stdin's write end
	// is kept for the life of the process.
	_ = cmd.Process.Release()
	watchdogPipes.Lock()
	watchdogPipes.w = append(watchdogPipes.w, stdinW)
	watchdogPipes.Unlock()

	_ = outR.SetReadDeadline(time.Now().Add(containerTimeout))
	line, err := bufio.NewReader(outR).ReadString('\n')
	line = strings.TrimSpace(line)
	switch {
	case strings.HasPrefix(line, "URL "):
		tb.Logf("pgtest: started a postgres container with dockerpg (removed when the test process exits)")
		return strings.TrimPrefix(line, "URL "), nil
	case strings.HasPrefix(line, "ERROR "):
		return "", errors.New(strings.TrimPrefix(line, "ERROR "))
	default:
		msg, _ := os.ReadFile(errFile.Name())
		return "", fmt.Errorf("dockerpg gave no URL (%v): %s", err, strings.TrimSpace(string(msg[:min(len(msg), 4096)])))
	}
}

// dockerReachable says whether a Docker engine may answer: DOCKER_HOST is set, or one of
// the usual sockets exists. dockerpg asks the engine itself; this only spares building it
// on machines without Docker.
func dockerReachable() error {
	if os.Getenv("DOCKER_HOST") != "" {
		return nil
	}
	socks := []string{"/var/run/docker.sock"}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		socks = append(socks, filepath.Join(d, "docker.sock"))
	}
	if h, err := os.UserHomeDir(); err == nil {
		socks = append(socks, filepath.Join(h, ".docker", "run", "docker.sock"))
	}
	return anySocket(socks)
}

// anySocket returns nil when one of socks exists, else an error naming them all.
func anySocket(socks []string) error {
	for _, s := range socks {
		if _, err := os.Stat(s); err == nil {
			return nil
		}
	}
	return fmt.Errorf("no Docker engine: DOCKER_HOST is unset and there is no socket at %s: start Docker, or set DOCKER_HOST", strings.Join(socks, ", "))
}
