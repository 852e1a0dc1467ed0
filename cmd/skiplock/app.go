// This file holds what every command shares and that uses no command: the invocation
// (app), usage errors, flag sets, and output helpers.

package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"
)

// app is one invocation of the command: its outputs and its global flags.
type app struct {
	stdout, stderr io.Writer
	getenv         func(string) string

	dbURL   string
	schema  string
	timeout time.Duration
}

// usageError is a mistake on the command line: exit status 2.
type usageError struct {
	cmd string // the command whose usage to point to; empty for the top level
	msg string
}

func (e *usageError) Error() string { return e.msg }

func usagef(cmd, format string, args ...any) error {
	return &usageError{cmd: cmd, msg: fmt.Sprintf(format, args...)}
}

// errHelpShown says the usage was printed on request: exit status 0.
var errHelpShown = errors.New("help shown")

// errUsageShown says the usage was printed to stderr as the whole answer: exit status 2.
var errUsageShown = errors.New("usage shown")

// newFlagSet returns a flag set that reports errors to its caller and prints nothing itself.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// globalFlags defines the global flags on fs, with the given defaults.
func (a *app) globalFlags(fs *flag.FlagSet, dbURL, schema string, timeout time.Duration) {
	fs.StringVar(&a.dbURL, "database-url", dbURL, "the PostgreSQL connection string; defaults to $DATABASE_URL")
	fs.StringVar(&a.schema, "schema", schema, `the schema holding skiplock's tables; defaults to "skiplock"`)
	fs.DurationVar(&a.timeout, "timeout", timeout, "the time limit of the whole command; defaults to 30s")
}

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// plural returns one when n is 1 and many otherwise.
func plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
