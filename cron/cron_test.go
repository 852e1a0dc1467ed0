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
