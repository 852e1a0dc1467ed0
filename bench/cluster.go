package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/skiplock/skiplock/internal/pgtest"
)

// benchCluster is a throwaway PostgreSQL cluster the bench starts for itself (the
// "autovacuum on" pass: the machine's own server must not be reconfigured), with the
// distribution's defaults apart from pgtest's (listen address, port, max_connections 200).
type benchCluster struct {
	c *pgtest.Cluster
}

// startCluster starts a cluster in a fresh folder under the system's temp dir.
func startCluster(ctx context.Context) (*benchCluster, error) {
	dir, err := os.MkdirTemp("", "skiplock-bench-")
	if err != nil {
		return nil, err
	}
	// The server runs as an unprivileged user when the bench runs as root: let it in.
	if err := os.Chmod(dir, 0o777); err != nil {
		return nil, err
	}
	c, err := pgtest.StartCluster(ctx, filepath.Join(dir, "pg"), pgtest.ClusterOptions{})
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start a throwaway cluster: %w", err)
	}
	return &benchCluster{c: c}, nil
}

// dsn is the URL of the cluster's postgres database.
func (b *benchCluster) dsn() string {
	u := url.URL{Scheme: "postgres", User: url.User("postgres"), Host: "127.0.0.1:" + strconv.Itoa(b.c.Port), Path: "/postgres", RawQuery: "sslmode=disable"}
	return u.String()
}

// setAutovacuum turns autovacuum on or off with ALTER SYSTEM (in this cluster's own
// postgresql.auto.conf) and reloads the configuration.
func (b *benchCluster) setAutovacuum(ctx context.Context, on bool) error {
	conn, err := pgx.Connect(ctx, b.dsn())
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	v := "off"
	if on {
		v = "on"
	}
	if _, err := conn.Exec(ctx, "ALTER SYSTEM SET autovacuum = "+v); err != nil {
		return err
	}
	_, err = conn.Exec(ctx, "SELECT pg_reload_conf()")
	return err
}

// stop stops the cluster and removes its folder.
func (b *benchCluster) stop(ctx context.Context) error {
	dir := filepath.Dir(b.c.Dir)
	err := b.c.Stop(ctx)
	if rerr := os.RemoveAll(dir); err == nil {
		err = rerr
	}
	return err
}

// passServers gives each -autovacuum pass its server: -dsn as it is, or (for "on", and
// for every pass with -own-cluster) a throwaway cluster started at the first pass that
// needs it and set for the pass. close stops that cluster.
type passServers struct {
	o       options
	cluster *benchCluster
}

// dsn returns the server of pass.
func (p *passServers) dsn(ctx context.Context, pass string) (string, error) {
	if pass == "" || (pass != "on" && !p.o.ownCluster) {
		return p.o.dsn, nil
	}
	if p.cluster == nil {
		fmt.Fprintln(os.Stderr, "starting a throwaway cluster for the run")
		c, err := startCluster(ctx)
		if err != nil {
			return "", err
		}
		p.cluster = c
	}
	if err := p.cluster.setAutovacuum(ctx, pass == "on"); err != nil {
		return "", err
	}
	return p.cluster.dsn(), nil
}

// close stops the throwaway cluster, if one was started.
func (p *passServers) close(ctx context.Context) {
	if p.cluster != nil {
		if err := p.cluster.stop(context.WithoutCancel(ctx)); err != nil {
			fmt.Fprintln(os.Stderr, "bench: stopping the throwaway cluster:", err)
		}
	}
}
