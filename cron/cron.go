// Package cron parses cron expressions into schedules for skiplock's periodic jobs
// ([skiplock.PeriodicJob]). It wraps the parser of github.com/robfig/cron/v3, so the root
// skiplock package keeps depending on pgx and the standard library only.
//
// Accepted: the standard five fields (minute, hour, day of month, month, day of week),
// with ranges, lists, steps and names (`*/15 9-17 * * MON-FRI`); the descriptors
// @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly and @every <duration>;
// and a time zone prefix, `CRON_TZ=Europe/Paris 0 9 * * *` (TZ= too). Without a zone the
// schedule runs in UTC, or in the location given to [ParseIn].
package cron

import (
	"fmt"
	"strings"
	"time"

	robfig "github.com/robfig/cron/v3"
)

// Schedule is a parsed cron expression. It satisfies skiplock.Schedule, and its String
// is the expression (with the zone given to ParseIn, if any), which skiplock stores and
// `skiplock periodic` shows.
type Schedule struct {
	expr  string
	sched robfig.Schedule
}

// Next returns the first time after t that the expression matches.
func (s *Schedule) Next(t time.Time) time.Time { return s.sched.Next(t) }

// String returns the expression as parsed.
func (s *Schedule) String() string { return s.expr }

// Parse parses expr; its times are in UTC unless expr starts with CRON_TZ= or TZ=.
func Parse(expr string) (*Schedule, error) {
	return ParseIn(expr, time.UTC)
}

// ParseIn parses expr with its times in loc, unless expr names its own zone with a
// CRON_TZ= or TZ= prefix. loc nil means UTC.
func ParseIn(expr string, loc *time.Location) (*Schedule, error) {
	if loc == nil {
		loc = time.UTC
	}
	expr = strings.TrimSpace(expr)
	spec := expr
	ownZone := strings.HasPrefix(expr, "CRON_TZ=") || strings.HasPrefix(expr, "TZ=")
	if !ownZone && loc != time.UTC {
		spec = "CRON_TZ=" + loc.String() + " " + expr
		expr = spec
	}
	s, err := robfig.ParseStandard(spec)
	if err != nil {
		return nil, fmt.Errorf("cron: %q: %w", expr, err)
	}
	if ss, ok := s.(*robfig.SpecSchedule); ok && !ownZone && loc == time.UTC {
		ss.Location = time.UTC // robfig's default is time.Local: pin it, hosts may differ
	}
	return &Schedule{expr: expr, sched: s}, nil
}

// MustParse is Parse that panics on a bad expression, for schedules written in code.
func MustParse(expr string) *Schedule {
	s, err := Parse(expr)
	if err != nil {
		panic(err)
	}
	return s
}
