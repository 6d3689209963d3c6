package console

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/bcrypt"
	"golang.org/x/time/rate"
)

// identity is who a request comes from and how it was authenticated.
type identity struct {
	Name string
	Role Role
	// Via is how: "token", "proxy" or "session"; a session's POSTs need
	// its CSRF token, the others' do not (no cookie is involved).
	Via     string
	session session
}

// key names the state kept for this person: the session, or the proxy's
// user (who has no session); "" for a token (no forms, no CSRF).
func (id identity) key() string {
	switch id.Via {
	case "session":
		return "session:" + id.session.ID
	case "proxy":
		return "proxy:" + id.Name
	}
	return ""
}

// errNoCredentials is a request without any credential; errBadToken one
// whose bearer token matches no console.tokens entry.
var (
	errNoCredentials = errors.New("authentication required: log in, or send Authorization: Bearer TOKEN")
	errBadToken      = errors.New("unknown API token")
)

// authenticate returns the request's identity: a bearer token, then a
// trusted proxy's header (from its addresses only: from anywhere else the
// header is ignored), then the session cookie. The error says why there
// is none (errExpired for an expired session).
func (c *Console) authenticate(r *http.Request) (identity, error) {
	if h := r.Header.Get("Authorization"); h != "" {
		// Only the Bearer scheme (case-insensitive, RFC 7235) is an API
		// token; another (a proxy's Basic) falls through to the others.
		if scheme, tok, _ := strings.Cut(strings.TrimSpace(h), " "); strings.EqualFold(scheme, "Bearer") {
			return c.tokenIdentity(strings.TrimSpace(tok))
		}
	}
	if id, ok := c.proxyIdentity(r); ok {
		return id, nil
	}
	ck, err := r.Cookie(cookieName)
	if err != nil {
		return identity{}, errNoCredentials
	}
	se, fp, err := c.sessions.check(r.Context(), ck.Value)
	if err != nil {
		return identity{}, err
	}
	// The role is the configuration's now: a removed user's session, or
	// one from before a password change, is refused.
	for _, u := range c.cfg.Users {
		if u.Name == se.Name {
			if subtle.ConstantTimeCompare(fingerprint(u.Hash), fp) != 1 {
				return identity{}, errUserChanged
			}
			return identity{Name: se.Name, Role: u.Role, Via: "session", session: se}, nil
		}
	}
	return identity{}, errUserChanged
}

// isAuthError reports whether err says the request has no valid
// credentials (401), rather than that the session store failed.
func isAuthError(err error) bool {
	for _, e := range []error{errNoCredentials, errBadToken, errExpired, errBadSession, errUserChanged} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// tokenIdentity compares the token's SHA-256 with every configured one in
// constant time (all of them, so the time says nothing of which matched).
func (c *Console) tokenIdentity(tok string) (identity, error) {
	sum := sha256.Sum256([]byte(tok))
	var found *Credential
	for i := range c.cfg.Tokens {
		if subtle.ConstantTimeCompare(sum[:], c.cfg.Tokens[i].Hash) == 1 && found == nil {
			found = &c.cfg.Tokens[i]
		}
	}
	if tok == "" || found == nil {
		return identity{}, errBadToken
	}
	return identity{Name: found.Name, Role: found.Role, Via: "token"}, nil
}

// proxyIdentity believes the trusted proxy's user header when the peer
// is one of its addresses.
func (c *Console) proxyIdentity(r *http.Request) (identity, bool) {
	p := c.cfg.Proxy
	if p.Header == "" {
		return identity{}, false
	}
	user := strings.TrimSpace(r.Header.Get(p.Header))
	if user == "" || len(user) > 256 || !fromProxy(r, p.Addresses) {
		return identity{}, false
	}
	role := p.DefaultRole
	if p.RoleHeader != "" {
		for _, g := range strings.Split(r.Header.Get(p.RoleHeader), ",") {
			for _, og := range p.OperatorGroups {
				if strings.TrimSpace(g) == og {
					role = Operator
				}
			}
		}
	}
	return identity{Name: user, Role: role, Via: "proxy"}, true
}

func fromProxy(r *http.Request, nets []*net.IPNet) bool {
	ip := net.ParseIP(clientAddress(r))
	for _, n := range nets {
		if ip != nil && n.Contains(ip) {
			return true
		}
	}
	return false
}

// clientAddress is the peer's IP (never a forwarded header: those are
// the client's to write).
func clientAddress(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// dummyHash is a hash at the cost of the configured users' (the first
// one's), compared against for an unknown name, so that the time of a
// login does not tell whether the name exists.
func dummyHash(users []Credential) []byte {
	cost := bcrypt.MinCost
	if len(users) > 0 {
		if c, err := bcrypt.Cost(users[0].Hash); err == nil {
			cost = c
		}
	}
	h, _ := bcrypt.GenerateFromPassword([]byte(randomID()), cost)
	return h
}

// checkPassword returns the user name and password's credential, or false.
func (c *Console) checkPassword(name, password string) (Credential, bool) {
	for _, u := range c.cfg.Users {
		if subtle.ConstantTimeCompare([]byte(u.Name), []byte(name)) == 1 {
			return u, bcrypt.CompareHashAndPassword(u.Hash, []byte(password)) == nil
		}
	}
	_ = bcrypt.CompareHashAndPassword(c.dummy, []byte(password))
	return Credential{}, false
}

// limiter bounds login attempts per key (a client address, a user
// name), and the log lines of its refusals.
type limiter struct {
	perMinute int
	now       func() time.Time
	mu        sync.Mutex
	by        map[string]*rate.Limiter
	logged    map[string]time.Time // key → when its refusal was last logged
}

// maxTracked bounds the addresses the limiter remembers; past it, it
// starts afresh (a flood of addresses then gets one fresh allowance each).
const maxTracked = 10000

func newLimiter(perMinute int, now func() time.Time) *limiter {
	return &limiter{perMinute: perMinute, now: now, by: map[string]*rate.Limiter{}, logged: map[string]time.Time{}}
}

// shouldLog reports whether a refusal of key is to be logged: at most
// once a minute per key.
func (l *limiter) shouldLog(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if at, ok := l.logged[key]; ok && now.Sub(at) < time.Minute {
		return false
	}
	if len(l.logged) >= maxTracked {
		l.logged = map[string]time.Time{}
	}
	l.logged[key] = now
	return true
}

// allow takes one attempt for addr; false when its allowance is spent.
func (l *limiter) allow(addr string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	lim := l.by[addr]
	if lim == nil {
		if len(l.by) >= maxTracked {
			l.by = map[string]*rate.Limiter{}
		}
		lim = rate.NewLimiter(rate.Every(time.Minute/time.Duration(l.perMinute)), l.perMinute)
		l.by[addr] = lim
	}
	return lim.AllowN(l.now(), 1)
}
