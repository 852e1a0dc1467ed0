package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// syncBuffer is a bytes.Buffer safe to write from the server and read from the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestUI_RefusesANonLoopbackListenWithoutAuth(t *testing.T) {
	t.Parallel()
	for _, listen := range []string{"0.0.0.0:8080", ":8080", "[::]:8080", "192.0.2.1:8080"} {
		r := cli(t, nil, "--database-url", unreachableURL, "ui", "--listen", listen)
		assert.Equal(t, exitUsage, r.code, r)
		assert.Contains(t, r.stderr, "reachable from other machines: set --token or --basic-auth", r)
	}
	// On loopback without auth, users of this machine get in only when the operator says
	// no proxy on it forwards to the dashboard.
	r := cli(t, nil, "--database-url", unreachableURL, "ui")
	assert.Equal(t, exitUsage, r.code, r)
	assert.Contains(t, r.stderr, "--trust-loopback", r)
	r = cli(t, nil, "--database-url", unreachableURL, "ui", "--trust-loopback", "--trusted-proxy", "10.0.0.0/8,127.0.0.1")
	assert.Equal(t, exitFail, r.code, r)
	assert.Contains(t, r.stderr, "cannot reach the database")
	r = cli(t, nil, "--database-url", unreachableURL, "ui", "--listen", "nonsense")
	assert.Equal(t, exitUsage, r.code, r)
	assert.Contains(t, r.stderr, "is not host:port")
	r = cli(t, nil, "--database-url", unreachableURL, "ui", "--basic-auth", "nocolon")
	assert.Equal(t, exitUsage, r.code, r)
	assert.Contains(t, r.stderr, "user:password")
	// With a token the address is accepted: the command goes on to connect (and fails there).
	r = cli(t, map[string]string{"SKIPLOCK_UI_TOKEN": "t0ken"}, "--database-url", unreachableURL, "ui", "--listen", "0.0.0.0:0")
	assert.Equal(t, exitFail, r.code, r)
	assert.Contains(t, r.stderr, "cannot reach the database")
}

func TestUI_ServesUntilInterrupted(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	f.insert(job{queue: "mail", status: "dead"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- runEnv(ctx, []string{"--database-url", f.url, "--schema", f.schema, "ui", "--listen", "127.0.0.1:0", "--trust-loopback"},
			func(string) string { return "" }, &stdout, &stderr)
	}()
	addrRE := regexp.MustCompile(`http://(127\.0\.0\.1:\d+)/`)
	// The address is printed once the server listens; or the command exits early.
	if !assert.Eventually(t, func() bool { return addrRE.MatchString(stdout.String()) || len(done) > 0 },
		30*time.Second, 20*time.Millisecond) {
		t.Fatalf("no address printed: %s %s", stdout.String(), stderr.String())
	}
	select {
	case code := <-done:
		t.Fatalf("ui exited early with %d: %s %s", code, stdout.String(), stderr.String())
	default:
	}
	addr := addrRE.FindStringSubmatch(stdout.String())[1]
	assert.Contains(t, stdout.String(), "no auth: users of this machine (loopback) only")

	resp, err := http.Get("http://" + addr + "/queues")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, string(body), `<tr data-queue="mail">`)

	// DNS rebinding: the same server reached under another site's name answers nothing.
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/queues", nil)
	require.NoError(t, err)
	req.Host = "evil.example" + addr[strings.LastIndex(addr, ":"):]
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusMisdirectedRequest, resp.StatusCode)
	assert.NotContains(t, string(body), "mail")

	cancel()
	select {
	case code := <-done:
		assert.Equal(t, exitOK, code, stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatal("ui did not stop after its context ended")
	}
}
