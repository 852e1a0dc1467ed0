package ui

// This file holds the login sessions (random ids kept by the server, with an idle and an
// absolute expiry, revoked by logout) and the backoff on wrong credentials.

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strconv"
	"sync"
	"time"
)

// Session and backoff limits.
const (
	// DefaultSessionIdle is how long a login session lasts without a request.
	DefaultSessionIdle = time.Hour
	// DefaultSessionMaxAge is how long a login session lasts at most, however busy.
	DefaultSessionMaxAge = 12 * time.Hour
	// maxSessions bounds the sessions kept; past it, logging in ends the oldest.
	maxSessions = 10_000
	// freeFails is how many wrong values one credential (the token, or basic auth) takes
	// before it backs off.
	freeFails = 5
	// firstBackoff is the first backoff; it doubles with each further wrong value, up to
	// maxBackoff. While a credential backs off, a wrong value gets 429 with Retry-After
	// (and counts); the right one is accepted at any time.
	firstBackoff = time.Second
	maxBackoff   = 15 * time.Minute
	// failForget is the quiet time after which a credential's wrong values are forgotten.
	failForget = 15 * time.Minute
)

// The credentials wrong values are counted by: per credential, not per client address
// (behind a proxy every client shares one, and an attacker has many).
const (
	credToken = "token"      // the bearer header and the login form
	credBasic = "basic auth" // any user name
)

// session is one signed-in browser.
type session struct {
	created, seen time.Time
}

// sessions keeps the login sessions of one Handler, by the SHA-256 of their cookie value
// (so the map holds nothing a memory dump could replay).
type sessions struct {
	mu     sync.Mutex
	byHash map[string]*session
	idle   time.Duration
	maxAge time.Duration
	now    func() time.Time
	fails  map[string]*backoff // by credential: credToken, credBasic
}

// backoff counts the recent wrong values of one credential.
type backoff struct {
	n     int       // wrong values since the last quiet spell of failForget
	last  time.Time // the latest
	until time.Time // wrong values before then get 429
}

func newSessions(idle, maxAge time.Duration) *sessions {
	return &sessions{byHash: map[string]*session{}, fails: map[string]*backoff{},
		idle: idle, maxAge: maxAge, now: time.Now}
}

func hashID(id string) string {
	s := sha256.Sum256([]byte(id))
	return hex.EncodeToString(s[:])
}

// create starts a session and returns its cookie value: 32 random bytes.
func (s *sessions) create() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails
	id := base64.RawURLEncoding.EncodeToString(b)
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.expire(now)
	if len(s.byHash) >= maxSessions {
		var oldest string
		var at time.Time
		for k, v := range s.byHash {
			if oldest == "" || v.created.Before(at) {
				oldest, at = k, v.created
			}
		}
		delete(s.byHash, oldest)
	}
	s.byHash[hashID(id)] = &session{created: now, seen: now}
	return id
}

// valid reports whether id is a live session, and marks it seen.
func (s *sessions) valid(id string) bool {
	if id == "" {
		return false
	}
	k := hashID(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.byHash[k]
	if !ok {
		return false
	}
	now := s.now()
	if now.Sub(v.seen) > s.idle || now.Sub(v.created) > s.maxAge {
		delete(s.byHash, k)
		return false
	}
	v.seen = now
	return true
}

// revoke ends the session id.
func (s *sessions) revoke(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byHash, hashID(id))
}

// expire drops the sessions that ended; s.mu is held.
func (s *sessions) expire(now time.Time) {
	for k, v := range s.byHash {
		if now.Sub(v.seen) > s.idle || now.Sub(v.created) > s.maxAge {
			delete(s.byHash, k)
		}
	}
}

// failed counts a wrong value of credential key and returns how long the backoff in
// force before it still lasts (0: none, answer 401). Each wrong value past freeFails
// doubles the backoff, so a guesser waits longer and longer, whether it waits or not; the
// right value is checked before this and never waits.
func (s *sessions) failed(key string) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	b := s.fails[key]
	if b == nil {
		b = &backoff{}
		s.fails[key] = b
	}
	var wait time.Duration
	if now.Before(b.until) {
		wait = b.until.Sub(now)
	}
	if now.Sub(b.last) >= failForget {
		b.n = 0
	}
	b.n++
	b.last = now
	if b.n > freeFails {
		d := min(firstBackoff<<min(b.n-freeFails-1, 30), maxBackoff)
		if until := now.Add(d); until.After(b.until) {
			b.until = until
		}
	}
	return wait
}

// retryAfter is a Retry-After value: whole seconds, at least 1.
func retryAfter(d time.Duration) string {
	return strconv.Itoa(max(1, int((d+time.Second-1)/time.Second)))
}
