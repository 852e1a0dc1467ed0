package ui_test

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
	"github.com/skiplock/skiplock/ui"
)

type sealedArgs struct {
	Card string `json:"card"`
}

func (sealedArgs) Kind() string { return "sealed_charge" }

// A job with encrypted args (skiplock.Keyring) shows the key's id on its page and
// "(encrypted)" in the lists, never the ciphertext.
func TestJobPages_EncryptedArgsAreRedacted(t *testing.T) {
	t.Parallel()
	b := setup(t, ui.Config{})
	ring, err := skiplock.NewKeyring("k-2026", map[string][]byte{"k-2026": make([]byte, 32)})
	require.NoError(t, err)
	c, err := skiplock.NewClient(b.client.Pool(), skiplock.Config{Schema: b.client.Schema(), Keyring: ring})
	require.NoError(t, err)
	row, err := c.Enqueue(b.ctx, sealedArgs{Card: "4111"}, &skiplock.EnqueueOptions{Encrypt: true})
	require.NoError(t, err)
	env, ok := skiplock.SealedKey(row.Payload)
	require.True(t, ok)
	require.Equal(t, "k-2026", env)

	r := b.get("/jobs/" + strconv.FormatInt(row.ID, 10))
	require.Equal(t, http.StatusOK, r.code, r.body)
	assert.Contains(t, r.body, "(encrypted with key k-2026)")
	assert.NotContains(t, r.body, "skiplock_sealed")
	r = b.get("/jobs?kind=sealed_charge")
	require.Equal(t, http.StatusOK, r.code, r.body)
	assert.Contains(t, r.body, "(encrypted)")
	assert.NotContains(t, r.body, "skiplock_sealed")
}
