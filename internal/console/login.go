package console

import (
	"net"
	"net/http"
	"strings"
	"time"
)

// loginData is the login page's.
type loginData struct {
	Token, Name, Message, Error string
}

// loginForm shows the login form with a fresh anti-forgery nonce.
func (c *Console) loginForm(w http.ResponseWriter, r *http.Request) {
	msg := map[string]string{"expired": errExpired.Error(), "changed": errUserChanged.Error()}[r.URL.Query().Get("m")]
	c.showLogin(w, http.StatusOK, loginData{Message: msg})
}

func (c *Console) showLogin(w http.ResponseWriter, code int, d loginData) {
	n := randomID()
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: n, Path: "/login", MaxAge: 1800,
		HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode})
	d.Token = c.sessions.loginToken(n)
	c.render(w, code, "login", c.view(nil, "Log in", "", d))
}

// login checks the form's anti-forgery token and the password, at most
// LoginRate attempts a minute per client address and per user name, and
// starts a session.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimSpace(r.PostFormValue("name"))
	client := c.loginClient(r)
	for _, lim := range []struct{ key, msg string }{
		{"client:" + client, "too many login attempts from your address: wait a minute and try again"},
		{"user:" + name[:min(len(name), 256)], "too many login attempts for this name: wait a minute and try again"},
	} {
		if !c.logins.allow(lim.key) {
			if c.logins.shouldLog(lim.key) {
				c.deps.Log.Warn("console login rate-limited (logged once a minute per key)", "key", lim.key, "client", client, "peer", clientAddress(r))
			}
			c.showLogin(w, http.StatusTooManyRequests, loginData{Error: lim.msg})
			return
		}
	}
	ck, err := r.Cookie(loginCookie)
	if err != nil || !c.sessions.checkLoginToken(ck.Value, r.PostFormValue("csrf")) {
		c.showLogin(w, http.StatusForbidden, loginData{Name: name, Error: "this login form is stale or foreign: it was reloaded, try again"})
		return
	}
	u, ok := c.checkPassword(name, r.PostFormValue("password"))
	if !ok {
		c.deps.Log.Warn("console login refused", "user", name, "client", client)
		c.showLogin(w, http.StatusUnauthorized, loginData{Name: name, Error: "unknown name or wrong password"})
		return
	}
	cookie, err := c.sessions.issue(r.Context(), u)
	if err != nil {
		c.pageError(w, r, nil, err)
		return
	}
	http.SetCookie(w, cookie)
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Path: "/login", MaxAge: -1, HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode})
	c.deps.Log.Info("console login", "user", u.Name, "role", u.Role, "client", client)
	http.Redirect(w, r, "/search", http.StatusSeeOther)
}

// loginClient is the client's address for the login limit: the last hop
// of X-Forwarded-For (the one the proxy appended) when the peer is one of
// the trusted proxy's addresses, the peer's address otherwise (the
// header is then the client's to write).
func (c *Console) loginClient(r *http.Request) string {
	peer := clientAddress(r)
	if !fromProxy(r, c.cfg.Proxy.Addresses) {
		return peer
	}
	hops := r.Header.Values("X-Forwarded-For")
	if len(hops) == 0 {
		return peer
	}
	list := strings.Split(hops[len(hops)-1], ",")
	if ip := net.ParseIP(strings.TrimSpace(list[len(list)-1])); ip != nil {
		return ip.String()
	}
	return peer
}

// logout ends the session (a POST with its CSRF token).
func (c *Console) logout(w http.ResponseWriter, r *http.Request, id *identity) error {
	if id.Via == "session" {
		if err := c.sessions.revoke(r.Context(), id.session); err != nil {
			return err
		}
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Path: "/", Expires: time.Unix(1, 0), MaxAge: -1,
		HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
	return nil
}
