package pgtest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
)

const (
	// containerImage is the server image of step 4 of URL.
	containerImage = "postgres:16-alpine"
	// dockerProbeTimeout bounds asking whether a Docker engine answers.
	dockerProbeTimeout = 2 * time.Second
	// containerTimeout bounds pulling the image and starting the container.
	containerTimeout = 5 * time.Minute
)

// startContainer starts a Postgres container for the rest of the test process (testcontainers'
// reaper removes it after the process exits) and returns its URL. It fails fast, without
// touching the container machinery, when no Docker engine answers.
func startContainer(tb testing.TB) (string, error) {
	tb.Helper()
	if err := dockerAnswers(context.Background()); err != nil {
		return "", fmt.Errorf("no Docker engine answered (%v): start Docker, or set DOCKER_HOST", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), containerTimeout)
	defer cancel()
	ctr, err := tcpostgres.Run(ctx, containerImage,
		tcpostgres.WithDatabase("test"),
		tcpostgres.WithUsername("postgres"),
		tcpostgres.WithPassword("postgres"),
		testcontainers.WithCmdArgs("-c", fmt.Sprintf("max_connections=%d", defaultMaxConnections)),
		tcpostgres.BasicWaitStrategies(),
	)
	if err != nil {
		_ = testcontainers.TerminateContainer(ctr) // accepts nil
		return "", fmt.Errorf("cannot start a %s container: %w", containerImage, err)
	}
	url, err := ctr.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		_ = testcontainers.TerminateContainer(ctr)
		return "", fmt.Errorf("cannot get the address of the %s container: %w", containerImage, err)
	}
	tb.Logf("pgtest: started a %s container (removed after the test process exits)", containerImage)
	return url, nil
}

// dockerAnswers pings the Docker engine testcontainers would use, giving up after
// dockerProbeTimeout. The client runs in a goroutine so that neither a panic nor a call that
// ignores its context can stall the tests; such a goroutine is left to finish on its own
// (its result channel is buffered).
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
