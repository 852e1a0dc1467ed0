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
