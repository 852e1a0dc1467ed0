package cron_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/cron"
)

func TestParse(t *testing.T) {
	t.Parallel()
	at := time.Date(2030, 3, 15, 10, 7, 30, 0, time.UTC) // a Friday
	paris, err := time.LoadLocation("Europe/Paris")
	require.NoError(t, err)
	for _, tc := range []struct {
		expr string
		loc  *time.Location
		want time.Time
	}{
		{"*/15 * * * *", nil, time.Date(2030, 3, 15, 10, 15, 0, 0, time.UTC)},
		{"0 9 * * MON-FRI", nil, time.Date(2030, 3, 18, 9, 0, 0, 0, time.UTC)},
		{"@hourly", nil, time.Date(2030, 3, 15, 11, 0, 0, 0, time.UTC)},
		{"@daily", nil, time.Date(2030, 3, 16, 0, 0, 0, 0, time.UTC)},
		{"@every 90s", nil, at.Add(90 * time.Second)},
		{"CRON_TZ=Europe/Paris 0 12 * * *", nil, time.Date(2030, 3, 15, 11, 0, 0, 0, time.UTC)}, // CET = UTC+1
		{"0 12 * * *", paris, time.Date(2030, 3, 15, 11, 0, 0, 0, time.UTC)},
	} {
		s, err := cron.ParseIn(tc.expr, tc.loc)
		require.NoError(t, err, tc.expr)
		assert.True(t, tc.want.Equal(s.Next(at)), "%s: got %s, want %s", tc.expr, s.Next(at), tc.want)
	}
	s, err := cron.ParseIn("0 12 * * *", paris)
	require.NoError(t, err)
	assert.Equal(t, "CRON_TZ=Europe/Paris 0 12 * * *", s.String(), "the zone is part of the stored description")

	for _, bad := range []string{"", "* * * *", "61 * * * *", "@fortnightly", "CRON_TZ=Mars/Olympus 0 * * * *"} {
		_, err := cron.Parse(bad)
		assert.Error(t, err, "%q", bad)
	}
	assert.Panics(t, func() { cron.MustParse("nope") })
}

// Expressions that robfig's parser mishandles are refused with an error that says why:
// a zone prefix alone panicked; an @every under a second, negative or zero ran every
// second, and one with a fraction of a second was cut to whole seconds; an expression no
// date matches (30 February) was accepted and never ran.
func TestParse_RefusesWhatWouldPanicOrRunOtherwise(t *testing.T) {
	t.Parallel()
	for expr, want := range map[string]string{
		"CRON_TZ=Europe/Paris":   "no expression after the time zone",
		"TZ=UTC   ":              "no expression after the time zone",
		"@every 0s":              "at least 1s",
		"@every -5m":             "at least 1s",
		"@every 500ms":           "at least 1s",
		"@every 1500ms":          "whole seconds",
		"@every soon":            "invalid duration",
		"0 0 30 2 *":             "matches no time",
		"0 0 31 4,6,9,11 *":      "matches no time",
		"CRON_TZ=UTC 0 0 30 2 *": "matches no time",
	} {
		var err error
		require.NotPanics(t, func() { _, err = cron.Parse(expr) }, "%q", expr)
		if assert.Error(t, err, "%q", expr) {
			assert.Contains(t, err.Error(), want, "%q", expr)
		}
	}
	for _, expr := range []string{"@every 1s", "@every 1h30m", "0 0 29 2 *", "0 0 31 * *", "0 0 30 2 MON"} {
		_, err := cron.Parse(expr)
		assert.NoError(t, err, "%q", expr)
	}
}

// ParseIn takes any *time.Location, not only one time.LoadLocation knows by name: a
// fixed zone failed with "unknown time zone".
func TestParseIn_AFixedZone(t *testing.T) {
	t.Parallel()
	loc := time.FixedZone("UTC+2", 2*60*60)
	s, err := cron.ParseIn("0 9 * * *", loc)
	require.NoError(t, err)
	at := time.Date(2030, 3, 15, 0, 0, 0, 0, time.UTC)
	assert.Equal(t, time.Date(2030, 3, 15, 7, 0, 0, 0, time.UTC), s.Next(at).UTC())
	assert.Equal(t, "CRON_TZ=UTC+2 0 9 * * *", s.String())
	d, err := cron.ParseIn("@daily", loc)
	require.NoError(t, err)
	assert.Equal(t, time.Date(2030, 3, 15, 22, 0, 0, 0, time.UTC), d.Next(at).UTC(), "a descriptor runs in loc too")
}

// 7 is Sunday in the day-of-week field, as in crontab(5), alone, as a range's end and in
// a stepped range; robfig's parser refused it ("above maximum (6)").
func TestParse_SevenIsSunday(t *testing.T) {
	t.Parallel()
	at := time.Date(2030, 3, 15, 10, 7, 30, 0, time.UTC) // a Friday
	sat := time.Date(2030, 3, 16, 0, 0, 0, 0, time.UTC)
	sun := time.Date(2030, 3, 17, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		expr string
		want []time.Time // the next runs from at
	}{
		{"0 0 * * 7", []time.Time{sun, sun.AddDate(0, 0, 7)}},
		{"0 0 * * 6-7", []time.Time{sat, sun, sat.AddDate(0, 0, 7)}},
		{"0 0 * * 5-7/2", []time.Time{sun, sun.AddDate(0, 0, 5), sun.AddDate(0, 0, 7)}}, // Fri, Sun
		{"0 0 * * 1,7", []time.Time{sun, sun.AddDate(0, 0, 1), sun.AddDate(0, 0, 7)}},
		{"CRON_TZ=UTC 0 0 * * 7", []time.Time{sun}},
	} {
		s, err := cron.Parse(tc.expr)
		require.NoError(t, err, tc.expr)
		next := at
		for _, want := range tc.want {
			next = s.Next(next)
			assert.True(t, want.Equal(next), "%s: got %s, want %s", tc.expr, next, want)
		}
		assert.Contains(t, s.String(), "7", "%s: the expression is stored as written", tc.expr)
	}
	for _, bad := range []string{"0 0 * * 8", "0 0 * * 7-8", "0 0 * * 7-5"} {
		_, err := cron.Parse(bad)
		assert.Error(t, err, "%q names no day of the week", bad)
	}
	// Other items keep the parser's reading: 1/2 is 1-6/2 (no Sunday), 0-6 every day.
	s, err := cron.Parse("0 0 * * 1/2")
	require.NoError(t, err)
	assert.True(t, time.Date(2030, 3, 18, 0, 0, 0, 0, time.UTC).Equal(s.Next(sat)), "1/2 ran on %s", s.Next(sat))
	s, err = cron.Parse("0 0 * * 0-7")
	require.NoError(t, err)
	assert.True(t, sat.Equal(s.Next(at)) && sun.Equal(s.Next(sat)), "0-7 is every day")
}
