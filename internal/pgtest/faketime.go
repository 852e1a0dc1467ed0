package pgtest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// FaketimeLibs are the places [FindFaketime] looks for libfaketime's multi-threaded
// library, Debian's first.
var FaketimeLibs = []string{
	"/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
	"/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
	"/usr/lib/faketime/libfaketimeMT.so.1",
	"/usr/local/lib/faketime/libfaketimeMT.so.1",
}

// FindFaketime returns the path of libfaketime's multi-threaded library (libfaketimeMT),
// or an error that says how to install it.
func FindFaketime() (string, error) {
	if p := os.Getenv("SKIPLOCK_FAKETIME_LIB"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("pgtest: SKIPLOCK_FAKETIME_LIB=%s: %w", p, err)
		}
		return p, nil
	}
	for _, p := range FaketimeLibs {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("pgtest: libfaketime is not installed (looked for %s): install it with `apt-get install -y libfaketime` (make test does, through scripts/ensure-env.sh), or set SKIPLOCK_FAKETIME_LIB to its libfaketimeMT.so.1", FaketimeLibs[0])
}

// FakeClock steps the wall clock of a server started with its [FakeClock.Env] in
// [ClusterOptions.Env]: the server runs under libfaketime, which reads the clock's offset
// from a file on every call (FAKETIME_NO_CACHE; see Cache), so a [FakeClock.Step] takes
// effect at once, as an NTP step or a VM resumed would. Only the wall clock steps: the server's
// monotonic clock (its timeouts and sleeps) runs on, as on a real machine. It is safe for
// concurrent use.
type FakeClock struct {
	// Cache, when positive, lets each server process re-read the offset at most once per
	// Cache (FAKETIME_CACHE_DURATION, whole seconds) instead of on every call: a step then
	// reaches every process within about twice Cache, and the server pays less for libfaketime (a
	// pgbench TPC-B run on 2 cores: 27% fewer transactions per second reading on every
	// call, 10–18% with a 1 s cache). Set it before [FakeClock.Env]. Defaults to zero:
	// every call reads the offset, and a step reaches every process at once.
	Cache time.Duration

	lib  string
	file string

	mu     sync.Mutex
	offset time.Duration
}

// NewFakeClock returns a clock at offset zero whose offset file is in dir (which the
// server's user must be able to reach, as the cluster's own directory is), or the error
// of [FindFaketime].
func NewFakeClock(dir string) (*FakeClock, error) {
	lib, err := FindFaketime()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("pgtest: cannot create %s: %w", dir, err)
	}
	c := &FakeClock{lib: lib, file: filepath.Join(dir, "faketime")}
	if err := c.write(0); err != nil {
		return nil, err
	}
	return c, nil
}

// Env is the environment that runs a server under the clock.
func (c *FakeClock) Env() []string {
	cache := "FAKETIME_NO_CACHE=1"
	if c.Cache > 0 {
		cache = "FAKETIME_CACHE_DURATION=" + strconv.Itoa(max(1, int(c.Cache/time.Second)))
	}
	return []string{
		"LD_PRELOAD=" + c.lib,
		"FAKETIME_TIMESTAMP_FILE=" + c.file,
		cache,
		// A step of the wall clock leaves CLOCK_MONOTONIC alone, as on a real machine.
		"FAKETIME_DONT_FAKE_MONOTONIC=1",
	}
}

// Step moves the server's wall clock by d (back when negative), from now on.
func (c *FakeClock) Step(d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.write(c.offset + d); err != nil {
		return err
	}
	c.offset += d
	return nil
}

// Offset is how far the server's wall clock is ahead of the real one (behind when negative).
func (c *FakeClock) Offset() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.offset
}

// write replaces the offset file with offset, atomically (a reader never sees half a file).
func (c *FakeClock) write(offset time.Duration) error {
	spec := strconv.FormatFloat(offset.Seconds(), 'f', 3, 64)
	if offset >= 0 {
		spec = "+" + spec
	}
	tmp := c.file + ".new"
	if err := os.WriteFile(tmp, []byte(spec+"\n"), 0o644); err != nil {
		return fmt.Errorf("pgtest: cannot write the fake clock's offset: %w", err)
	}
	if err := os.Rename(tmp, c.file); err != nil {
		return fmt.Errorf("pgtest: cannot write the fake clock's offset: %w", err)
	}
	return nil
}
