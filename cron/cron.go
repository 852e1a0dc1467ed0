// Package cron parses cron expressions into schedules for skiplock's periodic jobs
// ([skiplock.PeriodicJob]). It wraps the parser of github.com/robfig/cron/v3, so the root
// skiplock package keeps depending on pgx and the standard library only.
//
// Accepted: the standard five fields (minute, hour, day of month, month, day of week),
// with ranges, lists, steps and names (`*/15 9-17 * * MON-FRI`), Sunday as 0 or 7 as in
// crontab(5) (`0 0 * * 6-7`); the descriptors
// @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly and @every <duration>;
// and a time zone prefix, `CRON_TZ=Europe/Paris 0 9 * * *` (TZ= too). Without a zone the
// schedule runs in UTC, or in the location given to [ParseIn].
package cron

import (
	"fmt"
	"strconv"
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
//
// Besides robfig's syntax errors, Parse refuses an expression that matches no time in
// the five years after now (a day its months never have, such as `0 0 30 2 *`), and an
// @every that is not a whole number of seconds, at least 1s (robfig would run it every
// second, or cut it to whole seconds).
func Parse(expr string) (*Schedule, error) {
	return ParseIn(expr, time.UTC)
}

// ParseIn parses expr with its times in loc (any location, time.FixedZone's too), unless
// expr names its own zone with a CRON_TZ= or TZ= prefix. loc nil means UTC. It refuses
// what Parse refuses.
func ParseIn(expr string, loc *time.Location) (*Schedule, error) {
	if loc == nil {
		loc = time.UTC
	}
	expr = strings.TrimSpace(expr)
	spec := expr
	ownZone := strings.HasPrefix(expr, "CRON_TZ=") || strings.HasPrefix(expr, "TZ=")
	if !ownZone && loc != time.UTC {
		// The zone is shown by name, and set on the schedule below: robfig would look the
		// name up, which fails for a zone the tz database does not know (time.FixedZone).
		expr = "CRON_TZ=" + loc.String() + " " + expr
	}
	fail := func(format string, args ...any) (*Schedule, error) {
		return nil, fmt.Errorf("cron: %q: "+format, append([]any{expr}, args...)...)
	}
	body := spec
	if ownZone {
		// robfig's parser panics on a zone with nothing after it.
		_, rest, ok := strings.Cut(spec, " ")
		if body = strings.TrimSpace(rest); !ok || body == "" {
			return fail("no expression after the time zone (write CRON_TZ=Europe/Paris 0 9 * * *)")
		}
	}
	if d, ok := strings.CutPrefix(body, "@every "); ok {
		every, err := time.ParseDuration(strings.TrimSpace(d))
		switch {
		case err != nil:
			return fail("@every: %w", err)
		case every < time.Second:
			return fail("@every %s: use at least 1s", every)
		case every%time.Second != 0:
			return fail("@every %s: use whole seconds (robfig would cut it to %s)", every, every.Truncate(time.Second))
		}
	}
	s, err := robfig.ParseStandard(sundayAsZero(spec))
	if err != nil {
		return fail("%w", err)
	}
	if ss, ok := s.(*robfig.SpecSchedule); ok {
		if !ownZone {
			ss.Location = loc // robfig's default is time.Local, which hosts may differ on
		}
		if ss.Next(time.Now()).IsZero() { // robfig looks five years ahead
			return fail("the expression matches no time in the next five years (a day its months never have, such as 30 February?)")
		}
	}
	return &Schedule{expr: expr, sched: s}, nil
}

// sundayAsZero returns spec with 7 in its day-of-week field written as 0: crontab(5)
// takes both for Sunday, robfig's parser 0 only. A 7 alone becomes 0; a range or a
// stepped range with 7 as a bound becomes the list of its days. Anything else (names,
// descriptors, other fields, numbers out of range, which the parser then refuses) is
// left as it is.
func sundayAsZero(spec string) string {
	all := strings.Fields(spec)
	fields := all // without the zone prefix; shares all's array
	if strings.HasPrefix(spec, "CRON_TZ=") || strings.HasPrefix(spec, "TZ=") {
		fields = all[1:]
	}
	if len(fields) != 5 {
		return spec
	}
	items := strings.Split(fields[4], ",")
	changed := false
	for i, item := range items {
		if days, ok := expandSeven(item); ok {
			items[i], changed = days, true
		}
	}
	if !changed {
		return spec
	}
	fields[4] = strings.Join(items, ",")
	return strings.Join(all, " ")
}

// expandSeven rewrites one item of a day-of-week list that names 7 (7, N-7, N-7/S, or
// 7/S) into the days it names, 7 as 0; false for any other item, left to the parser.
func expandSeven(item string) (string, bool) {
	rng, stepText, stepped := strings.Cut(item, "/")
	lo, hi, isRange := strings.Cut(rng, "-")
	from, err := strconv.Atoi(lo)
	if err != nil {
		return "", false
	}
	to := from
	if isRange {
		if to, err = strconv.Atoi(hi); err != nil {
			return "", false
		}
	}
	step := 1
	if stepped {
		if step, err = strconv.Atoi(stepText); err != nil {
			return "", false
		}
	}
	if to != 7 || from < 0 || from > to || step < 1 {
		return "", false
	}
	var days []string
	var seen [7]bool // 0 and 7 are both Sunday
	for d := from; d <= to; d += step {
		day := d % 7
		if !seen[day] {
			seen[day] = true
			days = append(days, strconv.Itoa(day))
		}
	}
	return strings.Join(days, ","), true
}

// MustParse is Parse that panics on a bad expression, for schedules written in code.
func MustParse(expr string) *Schedule {
	s, err := Parse(expr)
	if err != nil {
		panic(err)
	}
	return s
}
