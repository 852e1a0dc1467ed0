package skiplock_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock"
)

type secretArgs struct {
	Card string `json:"card"`
}

func (secretArgs) Kind() string { return "charge" }

// alwaysSealed is a kind whose every job is encrypted.
type alwaysSealed struct {
	Token string `json:"token"`
}

func (alwaysSealed) Kind() string { return "sealed_kind" }
func (alwaysSealed) EnqueueOptions() skiplock.EnqueueOptions {
	return skiplock.EnqueueOptions{Encrypt: true}
}

func keyring(t *testing.T, current string, ids ...string) *skiplock.Keyring {
	t.Helper()
	keys := map[string][]byte{}
	for _, id := range append(ids, current) {
		k := make([]byte, 32)
		copy(k, id) // a fixed key per id, so two keyrings agree on it
		keys[id] = k
	}
	k, err := skiplock.NewKeyring(current, keys)
	require.NoError(t, err)
	return k
}

func clientWith(t *testing.T, b *bundle, cfg skiplock.Config) *skiplock.Client {
	t.Helper()
	cfg.Schema, cfg.Logger = b.schema, testLogger()
	c, err := skiplock.NewClient(b.pool, cfg)
	require.NoError(t, err)
	return c
}

// Every enqueue path stores only ciphertext and the key's id; the worker's handler gets
// the args back.
func TestEncrypt_EveryPathStoresCiphertextAndTheHandlerGetsTheArgs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := clientWith(t, b, skiplock.Config{Keyring: keyring(t, "k1")})
	enc := &skiplock.EnqueueOptions{Encrypt: true}
	_, err := c.Enqueue(b.ctx, secretArgs{Card: "4111-enqueue"}, enc)
	require.NoError(t, err)
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	_, err = c.EnqueueTx(b.ctx, tx, secretArgs{Card: "4111-tx"}, enc)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(b.ctx))
	_, err = c.EnqueueMany(b.ctx, []skiplock.EnqueueParams{{Args: secretArgs{Card: "4111-many"}, Options: enc}})
	require.NoError(t, err)
	_, err = c.EnqueueWorkflow(b.ctx, skiplock.Workflow{Name: "w", Tasks: []skiplock.WorkflowTask{{Name: "a", Args: secretArgs{Card: "4111-workflow"}, Options: enc}}})
	require.NoError(t, err)
	_, err = c.EnqueueSequence(b.ctx, "seq", secretArgs{Card: "4111-sequence"}, enc)
	require.NoError(t, err)
	_, err = c.EnqueueBatch(b.ctx, skiplock.Batch{Name: "b", Jobs: []skiplock.EnqueueParams{{Args: secretArgs{Card: "4111-batch"}, Options: enc}},
		Callback: alwaysSealed{Token: "4111-callback"}})
	require.NoError(t, err)
	_, err = c.Enqueue(b.ctx, alwaysSealed{Token: "4111-default"}, nil)
	require.NoError(t, err)

	const jobs = 8
	require.Equal(t, jobs-1, b.count(t, `SELECT count(*) FROM {s}.jobs`), "the batch's callback waits for its job")
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE payload::text LIKE '%4111%'`), "plaintext args in the jobs table")
	assert.Equal(t, jobs-1, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE payload->'skiplock_sealed'->>'kid' = 'k1'`))

	_, err = b.pool.Exec(b.ctx, b.q(`CREATE TABLE {s}.audit (card text)`))
	require.NoError(t, err)
	w, err := skiplock.NewWorker(c, skiplock.WorkerConfig{Logger: testLogger()})
	require.NoError(t, err)
	audit := b.q(`INSERT INTO {s}.audit VALUES ($1)`)
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[secretArgs]) error {
		_, err := b.pool.Exec(ctx, audit, job.Args.Card)
		return err
	}))
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[alwaysSealed]) error {
		_, err := b.pool.Exec(ctx, audit, job.Args.Token)
		return err
	}))
	defer runWorker(t, w)()
	eventually(t, 30*time.Second, func() bool { return b.count(t, `SELECT count(*) FROM {s}.audit`) == jobs }, "every job ran")
	var cards string
	require.NoError(t, b.pool.QueryRow(b.ctx, b.q(`SELECT string_agg(card, ' ' ORDER BY card) FROM {s}.audit`)).Scan(&cards))
	assert.Equal(t, "4111-batch 4111-callback 4111-default 4111-enqueue 4111-many 4111-sequence 4111-tx 4111-workflow", cards)
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE payload::text LIKE '%4111%'`), "plaintext args in the archive")
}

// Keys rotate: a ring whose current key is new still opens jobs sealed with the old one.
// A worker without the key fails the attempt (retried, not lost) with ErrNoKey; altered
// ciphertext, or a payload moved to a job of another kind, does not open (failed for good).
func TestEncrypt_RotationMissingKeysAndTampering(t *testing.T) {
	t.Parallel()
	b := setup(t)
	old := clientWith(t, b, skiplock.Config{Keyring: keyring(t, "k1")})
	enc := &skiplock.EnqueueOptions{Encrypt: true, MaxAttempts: 5}
	a, err := old.Enqueue(b.ctx, secretArgs{Card: "rotated"}, enc)
	require.NoError(t, err)
	rotated := keyring(t, "k2", "k1")
	opened, err := rotated.Open("charge", a.Payload)
	require.NoError(t, err)
	assert.JSONEq(t, `{"card": "rotated"}`, string(opened), "the new ring opens the old key's job")
	sealed, err := rotated.Seal("charge", []byte(`{"card": "new"}`))
	require.NoError(t, err)
	key, ok := skiplock.SealedKey(sealed)
	assert.True(t, ok)
	assert.Equal(t, "k2", key, "new jobs use the current key")

	_, err = keyring(t, "k3").Open("charge", a.Payload)
	assert.ErrorIs(t, err, skiplock.ErrNoKey)
	var nilRing *skiplock.Keyring
	_, err = nilRing.Open("charge", a.Payload)
	assert.ErrorIs(t, err, skiplock.ErrNoKey)
	_, err = rotated.Open("other_kind", a.Payload)
	assert.ErrorContains(t, err, "sealed for another kind")
	plain, err := rotated.Open("charge", []byte(`{"card": "plain"}`))
	require.NoError(t, err)
	assert.JSONEq(t, `{"card": "plain"}`, string(plain), "a payload that is not sealed is given as it is")

	// A worker whose ring lacks the key: the attempt fails with ErrNoKey, the job is
	// retried later, not lost; altered ciphertext fails the same way.
	b2, err := old.Enqueue(b.ctx, secretArgs{Card: "altered"}, enc)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET payload = jsonb_set(payload, '{skiplock_sealed,ct}', to_jsonb('AAAA' || substr(payload->'skiplock_sealed'->>'ct', 5)))
		WHERE id = $1`), b2.ID)
	require.NoError(t, err)
	stranger := clientWith(t, b, skiplock.Config{Keyring: keyring(t, "k3")})
	w, err := skiplock.NewWorker(stranger, skiplock.WorkerConfig{Logger: testLogger()})
	require.NoError(t, err)
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[secretArgs]) error { return nil }))
	stop := runWorker(t, w)
	eventually(t, 20*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE status = 'queued' AND attempts = 1`) == 2
	}, "both attempts failed and wait for a retry")
	stop()
	assert.Equal(t, 2, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE last_error LIKE '%does not hold%k1%'`))

	// A worker of the next deploy, holding both keys, runs the first and refuses the
	// altered one.
	next := clientWith(t, b, skiplock.Config{Keyring: rotated})
	w, err = skiplock.NewWorker(next, skiplock.WorkerConfig{Logger: testLogger()})
	require.NoError(t, err)
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[secretArgs]) error { return nil }))
	_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET run_at = now()`))
	require.NoError(t, err)
	defer runWorker(t, w)()
	eventually(t, 20*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs_archive WHERE id = $1`, a.ID) == 1 &&
			b.count(t, `SELECT count(*) FROM {s}.jobs WHERE id = $1 AND attempts = 2`, b2.ID) == 1
	}, "the old key's job ran; the altered one failed again")
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE id = $1 AND status = 'failed' AND last_error LIKE '%failed authentication with key "k1"%'`, b2.ID))
}

// Encrypt without a keyring, or args that no longer fit once sealed, are refused with
// nothing written.
func TestEncrypt_RefusedWithNothingWritten(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.client.Enqueue(b.ctx, secretArgs{Card: "x"}, &skiplock.EnqueueOptions{Encrypt: true})
	assert.ErrorIs(t, err, skiplock.ErrInvalidOptions)
	_, err = b.client.Enqueue(b.ctx, alwaysSealed{Token: "x"}, nil)
	assert.ErrorIs(t, err, skiplock.ErrInvalidOptions, "an args type's default Encrypt")
	small := clientWith(t, b, skiplock.Config{Keyring: keyring(t, "k1"), MaxPayloadBytes: 100})
	_, err = small.Enqueue(b.ctx, secretArgs{Card: "0123456789012345678901234567890123456789012345678901234567890123456789"}, &skiplock.EnqueueOptions{Encrypt: true})
	assert.ErrorIs(t, err, skiplock.ErrPayloadTooLarge)
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.jobs`))
	for name, keys := range map[string]map[string][]byte{
		"short key":   {"k": make([]byte, 7)},
		"bad id":      {"k 1": make([]byte, 32)},
		"no such key": {"other": make([]byte, 32)},
	} {
		current := "k"
		if name == "bad id" {
			current = "k 1"
		}
		_, err := skiplock.NewKeyring(current, keys)
		assert.Error(t, err, name)
	}
}

// Client.Update's new Args for an encrypted job are sealed as an enqueue seals them: a
// job sealed at enqueue stays sealed, and so does every job of a kind that always
// encrypts. A client without a keyring is refused instead of writing plaintext.
func TestEncrypt_UpdateSealsTheNewArgsOfAnEncryptedJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ring := keyring(t, "k1")
	c := clientWith(t, b, skiplock.Config{Keyring: ring})
	sealedJob, err := c.Enqueue(b.ctx, secretArgs{Card: "4111-old"}, &skiplock.EnqueueOptions{Encrypt: true})
	require.NoError(t, err)
	kindJob, err := c.Enqueue(b.ctx, alwaysSealed{Token: "4111-tok-old"}, nil)
	require.NoError(t, err)

	_, err = c.Update(b.ctx, sealedJob.ID, skiplock.JobUpdate{Args: secretArgs{Card: "4111-new"}})
	require.NoError(t, err)
	_, err = c.Update(b.ctx, kindJob.ID, skiplock.JobUpdate{Args: alwaysSealed{Token: "4111-tok-new"}})
	require.NoError(t, err)
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE payload::text LIKE '%4111%'`), "plaintext args in the jobs table")
	for id, want := range map[int64]string{sealedJob.ID: `{"card": "4111-new"}`, kindJob.ID: `{"token": "4111-tok-new"}`} {
		got, err := c.Get(b.ctx, id)
		require.NoError(t, err)
		key, ok := skiplock.SealedKey(got.Payload)
		assert.True(t, ok && key == "k1", "job %d is sealed with the current key", id)
		plain, err := ring.Open(got.Kind, got.Payload)
		require.NoError(t, err)
		assert.JSONEq(t, want, string(plain), "job %d has the new args", id)
	}

	// A client that cannot seal does not write the new args in plaintext.
	_, err = b.client.Update(b.ctx, sealedJob.ID, skiplock.JobUpdate{Args: secretArgs{Card: "4111-leak"}})
	assert.ErrorIs(t, err, skiplock.ErrInvalidOptions)
	assert.Zero(t, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE payload::text LIKE '%4111%'`), "plaintext args in the jobs table")
}

// payloadSeen records the payloads the worker's middleware (after the handler), error
// handler and hook were given.
type payloadSeen struct {
	mu   sync.Mutex
	seen []string
}

func (p *payloadSeen) add(b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen = append(p.seen, string(b))
}

func (p *payloadSeen) all() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.seen)
}

func (p *payloadSeen) JobStarted(ctx context.Context, job *skiplock.JobRow) context.Context {
	return ctx
}

func (p *payloadSeen) JobFinished(ctx context.Context, job *skiplock.JobRow, res skiplock.JobResult) {
	p.add(job.Payload)
}

func (p *payloadSeen) HandleError(ctx context.Context, job *skiplock.JobRow, status skiplock.JobStatus, err error) {
	p.add(job.Payload)
}

func (p *payloadSeen) HandleStuck(ctx context.Context, job *skiplock.JobRow, timeout time.Duration) {}

// The worker opens a sealed job's args for its handler alone: the middleware (after the
// handler as before it), the error handlers and the hooks see the sealed payload, as
// stored, so an error reporter that records the job does not record the plaintext.
func TestEncrypt_OnlyTheHandlerSeesThePlaintext(t *testing.T) {
	t.Parallel()
	b := setup(t)
	seen := &payloadSeen{}
	c := clientWith(t, b, skiplock.Config{Keyring: keyring(t, "k1"), Hooks: []skiplock.Hook{seen}})
	job, err := c.Enqueue(b.ctx, secretArgs{Card: "4111-secret"}, &skiplock.EnqueueOptions{Encrypt: true, MaxAttempts: 1})
	require.NoError(t, err)
	w, err := skiplock.NewWorker(c, skiplock.WorkerConfig{Logger: testLogger()})
	require.NoError(t, err)
	require.NoError(t, skiplock.Use(w, func(next skiplock.JobHandler) skiplock.JobHandler {
		return func(ctx context.Context, job *skiplock.JobRow) error {
			seen.add(job.Payload)
			err := next(ctx, job)
			seen.add(job.Payload)
			return err
		}
	}))
	require.NoError(t, skiplock.HandleErrors(w, seen))
	card := make(chan string, 1)
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[secretArgs]) error {
		card <- job.Args.Card
		return errors.New("declined")
	}))
	defer runWorker(t, w)()
	waitStatus(t, b, job.ID, skiplock.StatusDead, 20*time.Second, "the attempt failed")
	eventually(t, 10*time.Second, func() bool { return len(seen.all()) == 4 }, "middleware twice, the error handler and the hook")
	assert.Equal(t, "4111-secret", <-card, "the handler gets the args")
	for _, p := range seen.all() {
		key, ok := skiplock.SealedKey([]byte(p))
		assert.True(t, ok && key == "k1", "sealed payload seen: %s", p)
		assert.NotContains(t, p, "4111")
	}
}

// A Keyring not made by NewKeyring (nil, or its zero value) refuses to seal with an error
// rather than a nil-pointer panic, and opens only what is not sealed.
func TestEncrypt_KeyringNotFromNewKeyringSaysSo(t *testing.T) {
	t.Parallel()
	for name, k := range map[string]*skiplock.Keyring{"nil": nil, "zero": {}} {
		var err error
		assert.NotPanics(t, func() { _, err = k.Seal("charge", []byte(`{"card": "4111"}`)) }, name)
		assert.ErrorContains(t, err, "NewKeyring", name)
		sealed, err := keyring(t, "k1").Seal("charge", []byte(`{"card": "4111"}`))
		require.NoError(t, err)
		assert.NotPanics(t, func() { _, err = k.Open("charge", sealed) }, name)
		assert.ErrorIs(t, err, skiplock.ErrNoKey, name)
	}
}

// A sealed payload that fails authentication (altered ciphertext, or sealed for a job of
// another kind) never opens, whatever the worker or the attempt: the first attempt fails
// the job for good (status failed, kept), its error naming the key, rather than retrying
// it until it is dead. A job whose key the worker lacks is still retried.
func TestEncrypt_APayloadThatFailsAuthenticationFailsAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := clientWith(t, b, skiplock.Config{Keyring: keyring(t, "k1")})
	enc := &skiplock.EnqueueOptions{Encrypt: true, MaxAttempts: 5}
	altered, err := c.Enqueue(b.ctx, secretArgs{Card: "altered"}, enc)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET payload = jsonb_set(payload, '{skiplock_sealed,ct}', to_jsonb('AAAA' || substr(payload->'skiplock_sealed'->>'ct', 5)))
		WHERE id = $1`), altered.ID)
	require.NoError(t, err)
	moved, err := c.Enqueue(b.ctx, secretArgs{Card: "moved"}, enc)
	require.NoError(t, err)
	other, err := c.Enqueue(b.ctx, alwaysSealed{Token: "other kind"}, &skiplock.EnqueueOptions{RunAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, b.q(`UPDATE {s}.jobs SET payload = (SELECT payload FROM {s}.jobs WHERE id = $2) WHERE id = $1`), moved.ID, other.ID)
	require.NoError(t, err)
	noKey, err := clientWith(t, b, skiplock.Config{Keyring: keyring(t, "k9")}).Enqueue(b.ctx, secretArgs{Card: "no key"}, enc)
	require.NoError(t, err)

	w, err := skiplock.NewWorker(c, skiplock.WorkerConfig{Logger: testLogger()})
	require.NoError(t, err)
	require.NoError(t, skiplock.Handle(w, func(ctx context.Context, job *skiplock.Job[secretArgs]) error { return nil }))
	defer runWorker(t, w)()
	eventually(t, 20*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM {s}.jobs WHERE id = ANY($1) AND status = 'failed'`, []int64{altered.ID, moved.ID}) == 2 &&
			b.count(t, `SELECT count(*) FROM {s}.jobs WHERE id = $1 AND attempts = 1 AND status = 'queued'`, noKey.ID) == 1
	}, "the payloads that fail authentication failed; the one without its key waits for a retry")
	assert.Equal(t, 2, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE id = ANY($1) AND attempts = 1
		AND last_error LIKE '%failed authentication with key "k1"%' AND payload ? 'skiplock_sealed'`, []int64{altered.ID, moved.ID}),
		"failed at the first attempt, the key named, the payload kept")
	assert.Equal(t, 1, b.count(t, `SELECT count(*) FROM {s}.jobs WHERE id = $1 AND last_error LIKE '%does not hold%k9%'`, noKey.ID))
}
