package ui

// This file holds the login sessions (random ids kept by the server, with an idle and an
// absolute expiry, revoked by logout) and the throttle on wrong credentials.

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strconv"
	"sync"
	"time"
)

// Session and throttle limits.
const (
	// DefaultSessionIdle is how long a login session lasts without a request.
	DefaultSessionIdle = time.Hour
	// DefaultSessionMaxAge is how long a login session lasts at most, however busy.
	DefaultSessionMaxAge = 12 * time.Hour
	// maxSessions bounds the sessions kept; past it, logging in ends the oldest.
	maxSessions = 10_000
	// failWindow is the span over which wrong credentials are counted.
	failWindow = time.Minute
	// maxFailsPerClient is how many wrong tokens or passwords one client address may send
	// per failWindow; the next waits out the window (429 with Retry-After).
	maxFailsPerClient = 5
	// maxFailsGlobal bounds the wrong credentials of all clients together per failWindow,
	// so many addresses cannot share the guessing. Sessions already signed in keep working.
	maxFailsGlobal = 60
	// maxThrottled bounds the client addresses the throttle remembers.
	maxThrottled = 10_000
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
	fails  map[string]*failCount // by client address
	global failCount
}

type failCount struct {
	n     int
	start time.Time
}

func newSessions(idle, maxAge time.Duration) *sessions {
	return &sessions{byHash: map[string]*session{}, fails: map[string]*failCount{},
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

// throttled reports whether client may not try credentials now, and for how long.
func (s *sessions) throttled(client string) (bool, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	wait := time.Duration(0)
	if f := s.fails[client]; f != nil && now.Sub(f.start) < failWindow && f.n >= maxFailsPerClient {
		wait = max(wait, failWindow-now.Sub(f.start))
	}
	if now.Sub(s.global.start) < failWindow && s.global.n >= maxFailsGlobal {
		wait = max(wait, failWindow-now.Sub(s.global.start))
	}
	return wait > 0, wait
}

// failed counts a wrong credential from client. Past maxThrottled addresses within a
// window, a new address is not remembered: the global count stops it instead, at once.
func (s *sessions) failed(client string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	count := func(c *failCount) {
		if now.Sub(c.start) >= failWindow {
			c.n, c.start = 0, now
		}
		c.n++
	}
	f := s.fails[client]
	if f == nil && len(s.fails) >= maxThrottled {
		for k, v := range s.fails {
			if now.Sub(v.start) >= failWindow {
				delete(s.fails, k)
			}
		}
	}
	if f == nil && len(s.fails) >= maxThrottled {
		count(&s.global)
		s.global.n = max(s.global.n, maxFailsGlobal)
		return
	}
	if f == nil {
		f = &failCount{}
		s.fails[client] = f
	}
	count(f)
	count(&s.global)
}

// retryAfter is a Retry-After value: whole seconds, at least 1.
func retryAfter(d time.Duration) string {
	return strconv.Itoa(max(1, int((d+time.Second-1)/time.Second)))
}
