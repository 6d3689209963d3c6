package console_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"golang.org/x/crypto/bcrypt"

	"github.com/mailsvc/mailsvc/internal/console"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/operator"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
	"github.com/mailsvc/mailsvc/internal/templates"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(runThenCloseBrowser{m})
}

// runThenCloseBrowser closes the shared browser after the tests, before
// goleak looks for goroutines left behind.
type runThenCloseBrowser struct{ m *testing.M }

func (r runThenCloseBrowser) Run() int {
	defer closeBrowser()
	return r.m.Run()
}

// The people of every test: a viewer and an operator with passwords, and
// one API token of each role.
const (
	viewerName, viewerPassword     = "vera", "viewer-pass"
	operatorName, operatorPassword = "otto", "operator-pass"
)

var hashes = sync.OnceValue(func() map[string][]byte {
	out := map[string][]byte{}
	for _, p := range []string{viewerPassword, operatorPassword} {
		h, err := bcrypt.GenerateFromPassword([]byte(p), bcrypt.MinCost)
		if err != nil {
			panic(err)
		}
		out[p] = h
	}
	return out
})

// clock is the console's injected time.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// bundle is one console on a real listener over a fresh schema.
type bundle struct {
	sc                         *storetest.Schema
	base                       string
	clock                      *clock
	viewerToken, operatorToken string
	actions                    *operator.Actions
	cfg                        console.Config
	// providers are the configured providers of the next start (nil: all).
	providers []string
	// logs are what the consoles logged.
	logs logBuffer
}

// logBuffer is a log's text, safe for concurrent use.
type logBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.buf.String() }

// option changes the console's config before it starts.
type option func(*console.Config)

func randomToken(t *testing.T) string {
	b := make([]byte, 16)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}

func sum(tok string) []byte { s := sha256.Sum256([]byte(tok)); return s[:] }

func setup(t *testing.T, opts ...option) *bundle {
	t.Helper()
	sc := storetest.New(t)
	b := &bundle{sc: sc, clock: &clock{t: time.Now()}, viewerToken: randomToken(t), operatorToken: randomToken(t)}
	cfg := console.Config{Addr: "127.0.0.1:0",
		Users: []console.Credential{{Name: viewerName, Role: console.Viewer, Hash: hashes()[viewerPassword]},
			{Name: operatorName, Role: console.Operator, Hash: hashes()[operatorPassword]}},
		Tokens: []console.Credential{{Name: "helpdesk", Role: console.Viewer, Hash: sum(b.viewerToken)},
			{Name: "automation", Role: console.Operator, Hash: sum(b.operatorToken)}},
		SessionSecret: []byte(strings.Repeat("s", 32)),
	}
	for _, o := range opts {
		o(&cfg)
	}
	reg, err := templates.New(templates.Options{})
	require.NoError(t, err)
	b.actions = &operator.Actions{Store: sc.Store, FromDomain: "shop.example", Notices: reg.ResendNotice}
	b.cfg = cfg
	b.base = b.start(t, cfg)
	return b
}

// start serves a console of cfg over b's schema and returns its base URL:
// with b's config, another replica of it.
func (b *bundle) start(t *testing.T, cfg console.Config) string {
	t.Helper()
	c, err := console.New(cfg, console.Deps{Store: b.sc.Store, Actions: b.actions, Now: b.clock.Now, Providers: b.providers,
		Log: slog.New(slog.NewTextHandler(&b.logs, nil))})
	require.NoError(t, err)
	srv := console.NewServer(c, cfg.Addr)
	require.NoError(t, srv.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, srv.Stop(context.Background())) })
	return "http://" + srv.Addr()
}

// client is a browser without JavaScript: it keeps the session cookie by
// hand (Go's cookie jar keeps Secure cookies for https only) and does
// not follow redirects.
type client struct {
	t       *testing.T
	b       *bundle
	cookies map[string]string
	csrf    string
	header  http.Header
	// base is the console it talks to: "" for b's.
	base string
}

func (b *bundle) anonymous(t *testing.T) *client {
	return &client{t: t, b: b, cookies: map[string]string{}, header: http.Header{}}
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// login logs name in through the form and returns the session's client.
func (b *bundle) login(t *testing.T, name, password string) *client {
	t.Helper()
	c := b.anonymous(t)
	code, body := c.get("/login")
	require.Equal(t, http.StatusOK, code)
	code, body = c.post("/login", url.Values{"csrf": {csrfField.FindStringSubmatch(body)[1]}, "name": {name}, "password": {password}})
	require.Equal(t, http.StatusSeeOther, code, body)
	code, body = c.get("/search")
	require.Equal(t, http.StatusOK, code)
	c.csrf = csrfField.FindStringSubmatch(body)[1]
	return c
}

// reply is a response read whole (its body closed).
type reply struct {
	StatusCode int
	Header     http.Header
	cookies    []*http.Cookie
}

// Cookies are the cookies the response set.
func (r reply) Cookies() []*http.Cookie { return r.cookies }

func (c *client) do(req *http.Request) (reply, string) {
	c.t.Helper()
	for k, v := range c.cookies {
		req.AddCookie(&http.Cookie{Name: k, Value: v})
	}
	for k, v := range c.header {
		req.Header[k] = v
	}
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	for _, ck := range resp.Cookies() {
		if ck.MaxAge < 0 {
			delete(c.cookies, ck.Name)
		} else {
			c.cookies[ck.Name] = ck.Value
		}
	}
	return reply{resp.StatusCode, resp.Header, resp.Cookies()}, string(body)
}

func (c *client) request(method, path string, body io.Reader, contentType string) (reply, string) {
	c.t.Helper()
	base := c.base
	if base == "" {
		base = c.b.base
	}
	req, err := http.NewRequest(method, base+path, body)
	require.NoError(c.t, err)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	return c.do(req)
}

func (c *client) get(path string) (int, string) {
	c.t.Helper()
	resp, body := c.request(http.MethodGet, path, nil, "")
	return resp.StatusCode, body
}

// post sends a form.
func (c *client) post(path string, form url.Values) (int, string) {
	c.t.Helper()
	resp, body := c.request(http.MethodPost, path, strings.NewReader(form.Encode()), "application/x-www-form-urlencoded")
	return resp.StatusCode, body
}

// api calls the JSON API with token ("" for none) and returns the status
// and the decoded body.
func (b *bundle) api(t *testing.T, token, method, path string, body any) (int, map[string]any) {
	t.Helper()
	c := b.anonymous(t)
	if token != "" {
		c.header.Set("Authorization", "Bearer "+token)
	}
	var rd io.Reader
	if body != nil {
		j, err := json.Marshal(body)
		require.NoError(t, err)
		rd = strings.NewReader(string(j))
	}
	resp, text := c.request(method, path, rd, "application/json")
	var out map[string]any
	require.NoError(t, json.Unmarshal([]byte(text), &out), text)
	return resp.StatusCode, out
}

// mails counts the mail rows: an action refused changed nothing.
func (b *bundle) mails(t *testing.T) int64 { return b.sc.QueryInt(t, "SELECT count(*) FROM mail") }

// insertSent stores a sent mail of order orderID.
func (b *bundle) insertSent(t *testing.T, m storetest.Mail) string {
	t.Helper()
	_, err := storetest.InsertPending(context.Background(), b.sc.Store, m)
	require.NoError(t, err)
	key := m.DedupeKey
	if key == "" {
		key = mailtype.ConfirmationKey(m.OrderID)
	}
	b.sc.Exec(t, `UPDATE mail SET status = 'sent', sent_at = now(), attempts = 1, sends = 1, provider = 'smtp',
		provider_message_id = 'pm-'||id WHERE dedupe_key = $1`, key)
	return key
}
