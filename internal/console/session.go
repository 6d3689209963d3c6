package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// cookieName is the session cookie; loginCookie the login form's own
// anti-forgery nonce, before any session exists.
const (
	cookieName  = "mailsvc_console"
	loginCookie = "mailsvc_console_login"
)

// session is one login, as its signed cookie carries it.
type session struct {
	ID      string
	Name    string
	Role    Role
	Expires time.Time
}

// sessions signs and checks session cookies and CSRF tokens, and keeps,
// in memory, each session's unused confirmation nonces and the sessions
// logged out before their expiry.
type sessions struct {
	secret []byte
	ttl    time.Duration
	now    func() time.Time

	mu      sync.Mutex
	nonces  map[string]map[string]time.Time // session id → nonce → expiry
	revoked map[string]time.Time            // session id → its expiry
}

// errExpired is a session cookie past its expiry; errBadSession one that
// is not ours (forged, altered, from another secret) or logged out.
var (
	errExpired    = errors.New("your session has expired: log in again")
	errBadSession = errors.New("no valid session: log in")
)

// maxNonces bounds the unused confirmations kept per session: an older
// one is forgotten (its form then answers 409).
const maxNonces = 32

// nonceTTL is how long a confirmation page may be left open.
const nonceTTL = 30 * time.Minute

func newSessions(secret []byte, ttl time.Duration, now func() time.Time) (*sessions, error) {
	if secret == nil {
		secret = make([]byte, 32)
		_, _ = rand.Read(secret)
	}
	if len(secret) < 32 {
		return nil, errors.New("the session secret must be at least 32 bytes")
	}
	return &sessions{secret: secret, ttl: ttl, now: now,
		nonces: map[string]map[string]time.Time{}, revoked: map[string]time.Time{}}, nil
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

// issue starts a session for name and returns its cookie.
func (s *sessions) issue(name string, role Role) (session, *http.Cookie) {
	se := session{ID: randomID(), Name: name, Role: role, Expires: s.now().Add(s.ttl)}
	payload := strings.Join([]string{se.ID, base64.RawURLEncoding.EncodeToString([]byte(name)), string(role),
		strconv.FormatInt(se.Expires.Unix(), 10)}, ".")
	return se, &http.Cookie{Name: cookieName, Value: payload + "." + s.mac("session", payload), Path: "/",
		Expires: se.Expires, HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode}
}

// check returns the session of a cookie value: errBadSession for a value
// not signed by us or logged out, errExpired past its expiry.
func (s *sessions) check(value string) (session, error) {
	i := strings.LastIndexByte(value, '.')
	if i < 0 || !hmac.Equal([]byte(value[i+1:]), []byte(s.mac("session", value[:i]))) {
		return session{}, errBadSession
	}
	f := strings.Split(value[:i], ".")
	if len(f) != 4 {
		return session{}, errBadSession
	}
	name, err1 := base64.RawURLEncoding.DecodeString(f[1])
	exp, err2 := strconv.ParseInt(f[3], 10, 64)
	if err1 != nil || err2 != nil {
		return session{}, errBadSession
	}
	se := session{ID: f[0], Name: string(name), Role: Role(f[2]), Expires: time.Unix(exp, 0)}
	if !s.now().Before(se.Expires) {
		return session{}, errExpired
	}
	s.mu.Lock()
	_, out := s.revoked[se.ID]
	s.mu.Unlock()
	if out {
		return session{}, errBadSession
	}
	return se, nil
}

// revoke ends a session before its expiry (logout) and forgets its nonces.
func (s *sessions) revoke(se session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for id, exp := range s.revoked {
		if !now.Before(exp) {
			delete(s.revoked, id)
		}
	}
	s.revoked[se.ID] = se.Expires
	delete(s.nonces, "session:"+se.ID)
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
