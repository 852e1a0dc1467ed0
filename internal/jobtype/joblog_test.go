package jobtype

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The handler keeps attributes as JSON, groups as nested objects, in the group they were
// given in; errors as their text.
func TestJobLogHandler_AttrsAndGroups(t *testing.T) {
	_, st := WithState(context.Background(), 0)
	row := &JobRow{ID: 7, Attempts: 2, Fence: 99}
	log := slog.New(NewJobLogHandler(st, row))
	log.With("a", 1).WithGroup("g").With("b", "x").WithGroup("h").Info("m1", "c", true, "err", errors.New("boom"))
	log.Info("m2")
	log.WithGroup("g").Info("m3", slog.Group("", "inline", 1), slog.Group("sub", "d", 2.5))
	recs := st.TakeLogs()
	require.Len(t, recs, 3)
	assert.Equal(t, LogRecord{JobID: 7, Attempt: 2, Fence: 99, Seq: 1, At: recs[0].At, Level: slog.LevelInfo, Message: "m1", Attrs: recs[0].Attrs}, recs[0])
	assert.JSONEq(t, `{"a":1,"g":{"b":"x","h":{"c":true,"err":"boom"}}}`, string(recs[0].Attrs))
	assert.Nil(t, recs[1].Attrs)
	assert.JSONEq(t, `{"g":{"inline":1,"sub":{"d":2.5}}}`, string(recs[2].Attrs))
	assert.Nil(t, st.TakeLogs(), "taken")
}

// Past the bounds, records are dropped and a marker record says how many; messages are
// made storable (no NUL, valid UTF-8). The first record that does not fit ends what is
// kept: a record over the byte bound drops the small ones after it too, so the marker
// counts the records logged after the last one kept.
func TestJobLogHandler_Bounds(t *testing.T) {
	_, st := WithState(context.Background(), 0)
	log := slog.New(NewJobLogHandler(st, &JobRow{ID: 1, Attempts: 1, Fence: 5}))
	log.Info("nul\x00 and \xff")
	big := strings.Repeat("x", MaxLogBytes)
	log.Info(big) // alone over the byte bound: dropped, and so is every record after it
	for range 10 {
		log.Debug("r")
	}
	recs := st.TakeLogs()
	require.Len(t, recs, 2)
	assert.Equal(t, "nul and \uFFFD", recs[0].Message)
	last := recs[1]
	assert.Equal(t, slog.LevelWarn, last.Level)
	assert.Equal(t, int64(1), last.JobID)
	assert.Contains(t, last.Message, LogsTruncated+": 11 more")
	assert.Equal(t, 2, last.Seq)

	for range MaxLogRecords + 5 {
		log.Debug("r")
	}
	recs = st.TakeLogs()
	require.Len(t, recs, MaxLogRecords+1, "the record bound and the marker")
	assert.Contains(t, recs[MaxLogRecords].Message, LogsTruncated+": 5 more")
	assert.Equal(t, MaxLogRecords+1, recs[MaxLogRecords].Seq)
}
