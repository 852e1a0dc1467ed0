package skiplock_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

// Insert middleware rewrite a job before it is written, in order; what they change is
// stored, and they see the args before encryption.
func TestInsertMiddleware_RewritesTheJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var seen []string
	tenant := func(ctx context.Context, j *skiplock.InsertJob) error {
		seen = append(seen, string(j.Payload))
		j.Metadata["tenant"] = "acme"
		j.Priority = 7
		return nil
	}
	route := func(ctx context.Context, j *skiplock.InsertJob) error {
		if j.Metadata["tenant"] == "acme" { // sees what the first one did
			j.Queue = "acme"
		}
		var a map[string]any
		if err := json.Unmarshal(j.Payload, &a); err != nil {
			return err
		}
		a["card"] = "****" + a["card"].(string)[len(a["card"].(string))-4:]
		j.Payload, _ = json.Marshal(a)
		j.RunAt = time.Now().Add(time.Hour)
		return nil
	}
	c := clientWith(t, b, skiplock.Config{InsertMiddleware: []skiplock.InsertMiddleware{tenant, route}})
	row, err := c.Enqueue(b.ctx, secretArgs{Card: "4111111111111111"}, nil)
	require.NoError(t, err)
	assert.Equal(t, []string{`{"card":"4111111111111111"}`}, seen)
	assert.Equal(t, "acme", row.Queue)
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE queue = 'acme' AND priority = 7 AND metadata = '{"tenant": "acme"}'
		AND payload = '{"card": "****1111"}' AND run_at > now() + interval '59 minutes'`))

	// EnqueueMany and EnqueueTx go through them too; with Encrypt they see the plaintext
	// and the table holds the ciphertext of what they wrote.
	seen = nil
	enc := clientWith(t, b, skiplock.Config{InsertMiddleware: []skiplock.InsertMiddleware{tenant, route}, Keyring: keyring(t, "k1")})
	_, err = enc.EnqueueMany(b.ctx, []skiplock.EnqueueParams{{Args: secretArgs{Card: "5500000000000004"}, Options: &skiplock.EnqueueOptions{Encrypt: true}}})
	require.NoError(t, err)
	assert.Equal(t, []string{`{"card":"5500000000000004"}`}, seen)
	var stored []byte
	require.NoError(t, b.pool.QueryRow(b.ctx, b.q(`SELECT payload FROM {s}.jobs WHERE payload ? 'skiplock_sealed'`)).Scan(&stored))
	plain, err := keyring(t, "k1").Open("charge", stored)
	require.NoError(t, err)
	assert.JSONEq(t, `{"card": "****0004"}`, string(plain))
}

// A middleware's error, or a rewrite the enqueue would refuse from a caller, refuses the
// enqueue with nothing written; in the caller's transaction, the transaction stays usable.
func TestInsertMiddleware_RefusalsWriteNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	errNope := errors.New("nope")
	for name, c := range map[string]struct {
		mw   skiplock.InsertMiddleware
		want error
	}{
		"error":           {func(context.Context, *skiplock.InsertJob) error { return errNope }, errNope},
		"invalid queue":   {func(_ context.Context, j *skiplock.InsertJob) error { j.Queue = "No Such Queue!"; return nil }, skiplock.ErrInvalidQueue},
		"invalid JSON":    {func(_ context.Context, j *skiplock.InsertJob) error { j.Payload = []byte(`{"a":`); return nil }, skiplock.ErrInvalidPayload},
		"priority":        {func(_ context.Context, j *skiplock.InsertJob) error { j.Priority = 1 << 20; return nil }, skiplock.ErrInvalidOptions},
		"reserved key":    {func(_ context.Context, j *skiplock.InsertJob) error { j.Metadata["skiplock_batch"] = "1"; return nil }, skiplock.ErrInvalidOptions},
		"too large":       {func(_ context.Context, j *skiplock.InsertJob) error { j.Payload = make([]byte, 2<<20); return nil }, skiplock.ErrInvalidPayload},
		"large but valid": {func(_ context.Context, j *skiplock.InsertJob) error { j.Payload = bigJSON(2 << 20); return nil }, skiplock.ErrPayloadTooLarge},
	} {
		cl := clientWith(t, b, skiplock.Config{InsertMiddleware: []skiplock.InsertMiddleware{c.mw}})
		_, err := cl.Enqueue(b.ctx, secretArgs{Card: "1"}, nil)
		assert.ErrorIs(t, err, c.want, name)
		tx, err := b.pool.Begin(b.ctx)
		require.NoError(t, err)
		_, err = cl.EnqueueTx(b.ctx, tx, secretArgs{Card: "1"}, nil)
		assert.ErrorIs(t, err, c.want, name+", in a transaction")
		var one int
		require.NoError(t, tx.QueryRow(b.ctx, `SELECT 1`).Scan(&one), name+": the caller's transaction is usable")
		require.NoError(t, tx.Commit(b.ctx))
		_, err = cl.EnqueueMany(b.ctx, []skiplock.EnqueueParams{{Args: secretArgs{Card: "1"}}})
		assert.ErrorIs(t, err, c.want, name+", EnqueueMany")
	}
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.jobs`))
	_, err := skiplock.NewClient(b.pool, skiplock.Config{Schema: b.schema, InsertMiddleware: []skiplock.InsertMiddleware{nil}})
	assert.ErrorContains(t, err, "Config.InsertMiddleware[0]")
}

// bigJSON is a JSON string of about n bytes.
func bigJSON(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a'
	}
	b[0], b[n-1] = '"', '"'
	return b
}
