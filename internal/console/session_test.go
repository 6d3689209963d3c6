package console_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/mailsvc/mailsvc/internal/console"
)

// on returns a copy of c that talks to the console at base (a replica).
func (c *client) on(base string) *client {
	cp := *c
	cp.base = base
	return &cp
}

func TestSessionLogoutHoldsOnEveryReplicaAndAfterARestart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	replica := b.start(t, b.cfg)
	c := b.login(t, operatorName, operatorPassword)
	code, _ := c.on(replica).get("/search")
	require.Equal(t, http.StatusOK, code, "a session is good on another replica")
	cookie := c.cookies["mailsvc_console"]
	code, _ = c.post("/logout", url.Values{"csrf": {c.csrf}})
	require.Equal(t, http.StatusSeeOther, code)
	require.Equal(t, int64(0), b.sc.QueryInt(t, "SELECT count(*) FROM console_session"))
	// The stolen cookie, replayed on the other replica and on a restarted one.
	thief := b.anonymous(t)
	thief.cookies["mailsvc_console"] = cookie
	for _, base := range []string{replica, b.start(t, b.cfg)} {
		resp, _ := thief.on(base).request(http.MethodGet, "/search", nil, "")
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		require.Equal(t, "/login", resp.Header.Get("Location"))
	}
}

func TestSessionTakesTheRoleOfTheCurrentConfig(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.login(t, operatorName, operatorPassword)
	with := func(users ...console.Credential) string {
		cfg := b.cfg
		cfg.Users = users
		return b.start(t, cfg)
	}
	viewerHash := b.cfg.Users[0]
	demoted := with(viewerHash, console.Credential{Name: operatorName, Role: console.Viewer, Hash: b.cfg.Users[1].Hash})
	code, body := c.on(demoted).get("/actions/replay")
	require.Equal(t, http.StatusForbidden, code, "demoted to viewer")
	require.Contains(t, body, "your role is viewer")

	removed := with(viewerHash)
	resp, _ := c.on(removed).request(http.MethodGet, "/search", nil, "")
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, "removed")
	require.Equal(t, "/login?m=changed", resp.Header.Get("Location"))

	newHash, err := bcrypt.GenerateFromPassword([]byte("a new password"), bcrypt.MinCost)
	require.NoError(t, err)
	changed := with(viewerHash, console.Credential{Name: operatorName, Role: console.Operator, Hash: newHash})
	resp, _ = c.on(changed).request(http.MethodGet, "/search", nil, "")
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, "password changed")
	require.Equal(t, "/login?m=changed", resp.Header.Get("Location"))
	code, body = c.on(changed).get("/login?m=changed")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "your account was removed or its password changed: log in again")

	code, _ = c.get("/actions/replay")
	require.Equal(t, http.StatusConflict, code, "unchanged config: still an operator (refused for want of a broker, not for the role)")
}

func TestAnAuthorizationOtherThanBearerFallsBackToTheSession(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.login(t, viewerName, viewerPassword)
	c.header.Set("Authorization", "Basic dXNlcjpwYXNz")
	code, _ := c.get("/search")
	require.Equal(t, http.StatusOK, code)
	api := b.anonymous(t)
	api.header.Set("Authorization", "bearer "+b.viewerToken)
	code, _ = api.get("/api/v1/overview")
	require.Equal(t, http.StatusOK, code, "the scheme is case-insensitive")
	api.header.Set("Authorization", "Basic dXNlcjpwYXNz")
	code, body := api.get("/api/v1/overview")
	require.Equal(t, http.StatusUnauthorized, code)
	require.Contains(t, body, "authentication required")
}
