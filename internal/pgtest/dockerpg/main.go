// Command dockerpg starts a PostgreSQL container for pgtest (step 4 of pgtest.URL) and
// keeps it until its standard input closes. It is a module of its own so that
// testcontainers-go, and the Docker client it brings, stay out of skiplock's go.mod: a
// service that requires skiplock gets none of their lines in its go.sum.
//
// pgtest runs it with `go run .` in this directory, its stdin a pipe that only the test
// process holds. It prints one line: "URL <connection string>" once the server accepts
// connections, or "ERROR <reason>" (and exits 1). Then it waits for EOF on stdin — the
// test process has exited, however it exited — and removes the container.
// testcontainers' reaper would remove it anyway once this process is gone.
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
)

const (
	// containerImage is the server image.
	containerImage = "postgres:16-alpine"
	// dockerProbeTimeout bounds asking whether a Docker engine answers.
	dockerProbeTimeout = 2 * time.Second
	// containerTimeout bounds pulling the image and starting the container.
	containerTimeout = 5 * time.Minute
	// removeTimeout bounds removing the container at the end.
	removeTimeout = 30 * time.Second
)

func main() {
	maxConns := 200
	if len(os.Args) > 1 {
		if n, err := strconv.Atoi(os.Args[1]); err == nil && n > 0 {
			maxConns = n
		}
	}
	out := bufio.NewWriter(os.Stdout)
	ctr, url, err := start(maxConns)
	if err != nil {
		fmt.Fprintf(out, "ERROR %v\n", err)
		out.Flush()
		os.Exit(1)
	}
	fmt.Fprintf(out, "URL %s\n", url)
	out.Flush()
	_, _ = io.Copy(io.Discard, os.Stdin) // until the test process exits
	ctx, cancel := context.WithTimeout(context.Background(), removeTimeout)
	defer cancel()
	_ = ctr.Terminate(ctx)
}

func start(maxConns int) (*tcpostgres.PostgresContainer, string, error) {
	if err := dockerAnswers(context.Background()); err != nil {
		return nil, "", fmt.Errorf("no Docker engine answered (%v): start Docker, or set DOCKER_HOST", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), containerTimeout)
	defer cancel()
	ctr, err := tcpostgres.Run(ctx, containerImage,
		tcpostgres.WithDatabase("test"),
		tcpostgres.WithUsername("postgres"),
		tcpostgres.WithPassword("postgres"),
		testcontainers.WithCmdArgs("-c", fmt.Sprintf("max_connections=%d", maxConns)),
		tcpostgres.BasicWaitStrategies(),
	)
	if err != nil {
		_ = testcontainers.TerminateContainer(ctr) // accepts nil
		return nil, "", fmt.Errorf("cannot start a %s container: %w", containerImage, err)
	}
	url, err := ctr.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		_ = testcontainers.TerminateContainer(ctr)
		return nil, "", fmt.Errorf("cannot get the address of the %s container: %w", containerImage, err)
	}
	return ctr, url, nil
}

// dockerAnswers pings the Docker engine testcontainers would use, giving up after
// dockerProbeTimeout. The client runs in a goroutine so that neither a panic nor a call that
// ignores its context can stall the start.
func dockerAnswers(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, dockerProbeTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Errorf("the Docker client panicked: %v", r)
			}
		}()
		cli, err := testcontainers.NewDockerClientWithOpts(ctx)
		if err != nil {
			done <- err
			return
		}
		defer cli.Close()
		_, err = cli.Ping(ctx, client.PingOptions{})
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(dockerProbeTimeout + time.Second):
		return errors.New("no answer within " + (dockerProbeTimeout + time.Second).String())
	}
}
