// This file holds the shape of a command and of its parsed flags (options); the command
// table that names every command is in usage.go.

package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// command is one thing the tool does, such as "stats" or "migrate up".
type command struct {
	name    string // as typed: "stats", "migrate up"
	args    string // the synopsis after the name
	summary string // one line for the command list
	help    string // what `skiplock help <name>` explains, after the synopsis
	maxArgs int    // positional arguments allowed after the flags
	serve   bool   // runs until interrupted: --timeout bounds its requests, not the command
	// flags defines the command's own flags on fs, storing into o; nil when it has none.
	flags func(fs *flag.FlagSet, o *options)
	// check validates the parsed flags before anything connects; nil when nothing to check.
	check func(o *options) error
	run   func(ctx context.Context, a *app, o *options) error
}

// options holds the parsed flags of every command; each command defines the ones it uses.
type options struct {
	args   []string // positional arguments after the flags
	target int
	yes    bool
	json   bool
	status string
	queue  string
	kind   string
	limit  int
	ids    idList
	id     int64
	ui     uiOptions
	limits limitsOptions
	edit   editOptions

	sqlFormat string // migrate sql
	out       string // migrate sql
}

// idList is the value of requeue's --id: comma-separated job ids, the flag repeatable.
type idList []int64

func (l *idList) String() string {
	if l == nil {
		return ""
	}
	s := make([]string, len(*l))
	for i, id := range *l {
		s[i] = strconv.FormatInt(id, 10)
	}
	return strings.Join(s, ",")
}

func (l *idList) Set(v string) error {
	for part := range strings.SplitSeq(v, ",") {
		id, err := strconv.ParseInt(strings.TrimSpace(part), 10, 64)
		if err != nil || id <= 0 {
			return fmt.Errorf("%q is not a job id (a positive number)", part)
		}
		*l = append(*l, id)
	}
	return nil
}

// uiOptions are the flags of `skiplock ui`.
type uiOptions struct {
	listen        string
	readOnly      bool
	token         string
	basicAuth     string
	hosts         string
	trustLoopback bool
	proxies       string
}

// limitsOptions are the flags of `skiplock limits`.
type limitsOptions struct {
	queue          string
	concurrency    int
	keyConcurrency int
	rate           int
	ratePeriod     time.Duration
	keyRate        int
	keyRatePeriod  time.Duration
	fair           bool
	keyLimits      map[string]int // --key-limit DIM=N, repeated: QueueLimits.ConcurrencyKeys
	none           bool
	reset          bool
	set            bool // a limit flag (or --none) was given
}
