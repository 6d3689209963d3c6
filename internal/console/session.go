package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/mailsvc/mailsvc/internal/store"
)

// cookieName is the session cookie; loginCookie the login form's own
// anti-forgery nonce, before any session exists.
const (
	cookieName  = "mailsvc_console"
	loginCookie = "mailsvc_console_login"
)

// session is one login: its random id (the cookie carries it, signed;
// the store keeps only its SHA-256) and its user's name. The role is
// not part of it: it is read from the configuration on every request.
type session struct {
	ID      string
	Name    string
	Expires time.Time
}

// SessionStore keeps the sessions (table console_session), so that a
// logout holds on every replica and across restarts; *store.Store
// implements it.
type SessionStore interface {
	CreateConsoleSession(ctx context.Context, se store.ConsoleSession) error
	ConsoleSessionByID(ctx context.Context, sum [sha256.Size]byte) (store.ConsoleSession, error)
	DeleteConsoleSession(ctx context.Context, sum [sha256.Size]byte) error
}

// sessions signs session cookies and CSRF tokens, keeps the sessions in
// the store and, in memory, each session's unused confirmation nonces.
type sessions struct {
	secret []byte
	ttl    time.Duration
	now    func() time.Time
	store  SessionStore

	mu     sync.Mutex
	nonces map[string]map[string]time.Time // session id → nonce → expiry
}

// errExpired is a session past its expiry; errBadSession one that is not
// ours (forged, altered, from another secret) or logged out;
// errUserChanged one whose user was removed or whose password changed.
var (
	errExpired     = errors.New("your session has expired: log in again")
	errBadSession  = errors.New("no valid session: log in")
	errUserChanged = errors.New("your account was removed or its password changed: log in again")
)

// maxNonces bounds the unused confirmations kept per session: an older
// one is forgotten (its form then answers 409).
const maxNonces = 32

// nonceTTL is how long a confirmation page may be left open.
const nonceTTL = 30 * time.Minute

func newSessions(secret []byte, ttl time.Duration, now func() time.Time, st SessionStore) (*sessions, error) {
	if secret == nil {
		secret = make([]byte, 32)
		_, _ = rand.Read(secret)
	}
	if len(secret) < 32 {
		return nil, errors.New("the session secret must be at least 32 bytes")
	}
	return &sessions{secret: secret, ttl: ttl, now: now, store: st, nonces: map[string]map[string]time.Time{}}, nil
}

func randomID() string {
	b := make([]byte, 18)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func (s *sessions) mac(parts ...string) string {
	m := hmac.New(sha256.New, s.secret)
	m.Write([]byte(strings.Join(parts, "\x00")))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// fingerprint is the SHA-256 of a user's password hash: a session is
// bound to it at login and refused once the configured hash differs.
func fingerprint(hash []byte) []byte { s := sha256.Sum256(hash); return s[:] }

// issue stores a new session for u (32 random bytes as its id) and
// returns its cookie.
func (s *sessions) issue(ctx context.Context, u Credential) (*http.Cookie, error) {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	now := s.now()
	se := store.ConsoleSession{IDSum: sha256.Sum256([]byte(id)), User: u.Name, HashFingerprint: fingerprint(u.Hash),
		Created: now, Expires: now.Add(s.ttl)}
	if err := s.store.CreateConsoleSession(ctx, se); err != nil {
		return nil, err
	}
	return &http.Cookie{Name: cookieName, Value: id + "." + s.mac("session", id), Path: "/",
		Expires: se.Expires, HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode}, nil
}

// check returns the session of a cookie value and the fingerprint it was
// bound to: errBadSession for a value not signed by us or logged out,
// errExpired past its expiry, a store error as it is.
func (s *sessions) check(ctx context.Context, value string) (session, []byte, error) {
	id, mac, ok := strings.Cut(value, ".")
	if !ok || len(id) != 64 || !hmac.Equal([]byte(mac), []byte(s.mac("session", id))) {
		return session{}, nil, errBadSession
	}
	st, err := s.store.ConsoleSessionByID(ctx, sha256.Sum256([]byte(id)))
	if errors.Is(err, store.ErrNotFound) {
		return session{}, nil, errBadSession
	}
	if err != nil {
		return session{}, nil, err
	}
	if !s.now().Before(st.Expires) {
		return session{}, nil, errExpired
	}
	return session{ID: id, Name: st.User, Expires: st.Expires}, st.HashFingerprint, nil
}

// revoke ends a session before its expiry (logout), on every replica,
// and forgets its nonces.
func (s *sessions) revoke(ctx context.Context, se session) error {
	s.mu.Lock()
	delete(s.nonces, "session:"+se.ID)
	s.mu.Unlock()
	return s.store.DeleteConsoleSession(ctx, sha256.Sum256([]byte(se.ID)))
}

// csrf is the anti-forgery token of the session (or proxy user) key:
// every form carries it.
func (s *sessions) csrf(key string) string { return s.mac("csrf", key) }

// checkCSRF reports whether token is key's own (constant time).
func (s *sessions) checkCSRF(key, token string) bool {
	return hmac.Equal([]byte(token), []byte(s.csrf(key)))
}

// loginToken is the login form's anti-forgery token for the nonce of its
// cookie.
func (s *sessions) loginToken(nonce string) string { return s.mac("login", nonce) }

// checkLoginToken reports whether token is the login token of nonce.
func (s *sessions) checkLoginToken(nonce, token string) bool {
	return nonce != "" && hmac.Equal([]byte(token), []byte(s.loginToken(nonce)))
}

// nonce issues a one-time confirmation for the action described by what
// (its name and target): the POST that runs it must bring it back.
func (s *sessions) nonce(key, what string) string {
	n := randomID()
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	// Forget what expired, of every session: a few people's confirmations.
	for sk, sm := range s.nonces {
		for k, exp := range sm {
			if !now.Before(exp) {
				delete(sm, k)
			}
		}
		if len(sm) == 0 {
			delete(s.nonces, sk)
		}
	}
	m := s.nonces[key]
	if m == nil {
		m = map[string]time.Time{}
		s.nonces[key] = m
	}
	for len(m) >= maxNonces {
		delete(m, oldest(m))
	}
	m[n+"\x00"+what] = now.Add(nonceTTL)
	return n
}

// oldest is the key of m that expires first.
func oldest(m map[string]time.Time) string {
	var key string
	var first time.Time
	for k, exp := range m {
		if key == "" || exp.Before(first) {
			key, first = k, exp
		}
	}
	return key
}

// consume uses up the confirmation n of what: false when it was never
// issued to this session for this action, has been used, or expired.
func (s *sessions) consume(key, n, what string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.nonces[key]
	exp, ok := m[n+"\x00"+what]
	if !ok {
		return false
	}
	delete(m, n+"\x00"+what)
	return s.now().Before(exp)
}
