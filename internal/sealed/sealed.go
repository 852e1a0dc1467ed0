// Package sealed holds encrypted args: a Keyring of AES-GCM keys, the sealing of a job's
// payload before it is written (EnqueueOptions.Encrypt in the root package) and its
// opening in the worker, just before the handler decodes it. The database, its backups,
// the CLI and the dashboard only ever see ciphertext. The root package re-exports
// Keyring, NewKeyring, ErrNoKey and SealedKey.

package sealed

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
)

// ErrNoKey is the error of an attempt whose job is encrypted with a key the worker's
// [Keyring] does not hold (or whose client has none), and of [Keyring.Open] for such a
// payload. The attempt fails and is retried like any failure, so a worker of another
// deploy that holds the key can run it. (A payload that fails authentication with a key
// the ring holds is not retried: the job fails for good.)
var ErrNoKey = errors.New("skiplock: the job's args are encrypted with a key this client does not hold")

// Keyring holds the AES-GCM keys that encrypt and decrypt jobs' args (the root package's Config.Keyring):
// new jobs are sealed with the current key, and a job sealed with any key of the ring
// can be opened, so keys rotate by adding the new one as current and keeping the old
// ones until the jobs they sealed are gone. Each stored payload names its key by id.
type Keyring struct {
	current string
	aeads   map[string]cipher.AEAD
}

// keyIDRE is what a key id may be: it is stored in every sealed payload.
var keyIDRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// NewKeyring returns a keyring that seals with keys[current] and opens with any of keys.
// Keys are 16, 24 or 32 bytes (AES-128, -192, -256), from a secret store: never derive
// them from a password. Ids are 1-64 characters of [A-Za-z0-9._-].
func NewKeyring(current string, keys map[string][]byte) (*Keyring, error) {
	if _, ok := keys[current]; !ok {
		return nil, fmt.Errorf("skiplock: NewKeyring: the current key %q is not among the keys", truncate(current))
	}
	k := &Keyring{current: current, aeads: make(map[string]cipher.AEAD, len(keys))}
	for id, key := range keys {
		if !keyIDRE.MatchString(id) {
			return nil, fmt.Errorf("skiplock: NewKeyring: key id %q: use 1-64 characters of [A-Za-z0-9._-]", truncate(id))
		}
		block, err := aes.NewCipher(key)
		if err != nil {
			return nil, fmt.Errorf("skiplock: NewKeyring: key %q: %w (use 16, 24 or 32 bytes)", id, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("skiplock: NewKeyring: key %q: %w", id, err)
		}
		k.aeads[id] = aead
	}
	return k, nil
}

// sealedField is the one field of a sealed payload: {"skiplock_sealed": {...}}.
const sealedField = "skiplock_sealed"

// sealed is a sealed payload's envelope: the key's id, the nonce and the ciphertext
// (base64, as encoding/json writes []byte). The additional data is sealedAAD of the job's
// kind, so a payload copied onto a job of another kind does not open.
type sealed struct {
	V     int    `json:"v"`
	Key   string `json:"kid"`
	Nonce []byte `json:"nonce"`
	Data  []byte `json:"ct"`
}

// sealedAAD binds a sealed payload to its job's kind.
func sealedAAD(kind string) []byte { return []byte("skiplock/sealed/v1/" + kind) }

// Seal encrypts payload, the args of a job of kind as JSON, with the current key, and
// returns the JSON the jobs table stores. Enqueues call it for jobs with
// EnqueueOptions.Encrypt; it is exported for tools that write jobs by other means. A
// keyring not made by NewKeyring (nil, or the zero Keyring) returns an error.
func (k *Keyring) Seal(kind string, payload []byte) ([]byte, error) {
	if k == nil || k.aeads[k.current] == nil {
		return nil, errors.New("skiplock: Keyring.Seal: the keyring has no key: make it with NewKeyring")
	}
	aead := k.aeads[k.current]
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	env := sealed{V: 1, Key: k.current, Nonce: nonce, Data: aead.Seal(nil, nonce, payload, sealedAAD(kind))}
	return json.Marshal(map[string]sealed{sealedField: env})
}

// Open returns the args of a job of kind as JSON from its stored payload: the payload
// itself when it is not sealed, else its decryption. It returns [ErrNoKey] when the key
// that sealed it is not in k (or k is nil), and an error saying the payload failed
// authentication with its key when it was tampered with or belongs to a job of another
// kind: a worker fails such a job for good, while it retries one after ErrNoKey.
func (k *Keyring) Open(kind string, payload []byte) ([]byte, error) {
	env, ok := sealedEnvelope(payload)
	if !ok {
		return payload, nil
	}
	if k == nil {
		return nil, fmt.Errorf("%w (key %q): set Config.Keyring", ErrNoKey, env.Key)
	}
	aead, ok := k.aeads[env.Key]
	if !ok {
		return nil, fmt.Errorf("%w (key %q)", ErrNoKey, env.Key)
	}
	if len(env.Nonce) != aead.NonceSize() {
		return nil, fmt.Errorf("skiplock: the job's sealed args failed authentication with key %q: malformed nonce", env.Key)
	}
	plain, err := aead.Open(nil, env.Nonce, env.Data, sealedAAD(kind))
	if err != nil {
		return nil, fmt.Errorf("skiplock: the job's sealed args failed authentication with key %q: altered, or sealed for another kind", env.Key)
	}
	return plain, nil
}

// sealedEnvelope returns the envelope of a sealed payload, or false for any other
// payload (args that merely have a field of that name are not an envelope: it must be
// the only field and decode as one).
func sealedEnvelope(payload []byte) (sealed, bool) {
	if !bytes.Contains(payload, []byte(`"`+sealedField+`"`)) {
		return sealed{}, false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(payload, &m) != nil || len(m) != 1 {
		return sealed{}, false
	}
	raw, ok := m[sealedField]
	if !ok {
		return sealed{}, false
	}
	var env sealed
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if dec.Decode(&env) != nil || env.V != 1 || env.Key == "" {
		return sealed{}, false
	}
	return env, true
}

// SealedKey returns the id of the key that sealed a stored payload, and false when the
// payload is not sealed: what the CLI and the dashboard show instead of the args.
func SealedKey(payload []byte) (string, bool) {
	env, ok := sealedEnvelope(payload)
	return env.Key, ok
}

// truncate cuts a key id shown in an error to 64 bytes.
func truncate(s string) string {
	if len(s) > 64 {
		return s[:64]
	}
	return s
}
