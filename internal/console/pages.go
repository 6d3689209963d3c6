package console

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/mail"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mailsvc/mailsvc/internal/operator"
	"github.com/mailsvc/mailsvc/internal/store"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static/console.css
var staticFS embed.FS

// pages holds one parsed template per page, each with the layout.
type pages struct{ byName map[string]*template.Template }

// funcs are the templates' helpers; none returns template.HTML: every
// stored or typed string is escaped by html/template.
var funcs = template.FuncMap{
	"stamp": func(t any) string {
		switch v := t.(type) {
		case time.Time:
			return operator.Stamp(&v)
		case *time.Time:
			return operator.Stamp(v)
		}
		return ""
	},
	"keypath": keyPath,
	"result":  store.AuditResultText,
	"address": displayAddress,
	"header":  displayHeader,
	// lag rounds a delivery lag for reading: whole milliseconds under a
	// second, tenths of a second above.
	"lag": func(d time.Duration) string {
		if d < time.Second {
			return d.Round(time.Millisecond).String()
		}
		return d.Round(100 * time.Millisecond).String()
	},
}

// displayAddress is an address with its display name as the mail's
// header carries it (RFC 5322: a name with specials quoted), so that a
// name like `x <evil@attacker.com>` cannot read as a second recipient.
// An ASCII name is as net/mail writes it; a name with other characters
// is shown as a quoted UTF-8 string (RFC 6532) rather than its RFC 2047
// encoding, which no person reads.
func displayAddress(name, address string) string {
	a := &mail.Address{Name: name, Address: address}
	for _, r := range name {
		if r >= utf8.RuneSelf {
			q := strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(name)
			return `"` + q + `" <` + address + ">"
		}
	}
	return a.String()
}

// displayHeader is a stored From or Reply-To header (name <address>)
// shown as displayAddress shows it; one that does not parse as it is.
func displayHeader(h string) string {
	a, err := mail.ParseAddress(h)
	if err != nil {
		return h
	}
	return displayAddress(a.Name, a.Address)
}

func loadPages() (*pages, error) {
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	p := &pages{byName: map[string]*template.Template{}}
	for _, n := range names {
		if n == "templates/layout.html" {
			continue
		}
		t, err := template.New("").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", n)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", n, err)
		}
		p.byName[n[len("templates/"):len(n)-len(".html")]] = t
	}
	return p, nil
}

// view is what every page's template gets.
type view struct {
	Title string
	Nav   string
	Who   *identity
	CSRF  string
	Data  any
}

// render writes the page name with data, status code.
func (c *Console) render(w http.ResponseWriter, code int, name string, v view) {
	var buf bytes.Buffer
	if err := c.pages.byName[name].ExecuteTemplate(&buf, "layout", v); err != nil {
		c.deps.Log.Error("console page", "page", name, "error", err)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

// pageError renders err as a page with its status.
func (c *Console) pageError(w http.ResponseWriter, r *http.Request, id *identity, err error) {
	he := classify(err)
	c.logAnswer("console page", r, he, err)
	heading := map[int]string{400: "That input cannot be used", 403: "Not allowed", 404: "Not found",
		409: "Refused", 503: "Unavailable", 500: "Something went wrong"}[he.Status]
	c.render(w, he.Status, "error", c.view(id, heading, "", struct{ Heading, Message string }{heading, he.Msg}))
}

// partError is the text shown in place of a part of a page that could
// not be read; an unexpected error is logged.
func (c *Console) partError(err error) string {
	he := classify(err)
	switch {
	case he.Status == http.StatusInternalServerError:
		c.deps.Log.Error("console read", "kind", he.Kind, "error", err)
	case he.Status >= 500:
		c.deps.Log.Warn("console read", "status", he.Status, "kind", he.Kind, "error", err)
	}
	return he.Msg
}

// view fills a view for id.
func (c *Console) view(id *identity, title, nav string, data any) view {
	v := view{Title: title, Nav: nav, Who: id, Data: data}
	if id != nil && id.key() != "" {
		v.CSRF = c.sessions.csrf(id.key())
	}
	return v
}

// pageHandler is a page's handler once the person is known.
type pageHandler func(w http.ResponseWriter, r *http.Request, id *identity) error

// page authenticates a page request (no credentials or an expired
// session: to the login page, saying why), checks a POST's CSRF token and,
// with operator set, the role; then calls h and renders its error.
func (c *Console) page(operatorOnly bool, h pageHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, err := c.authenticate(r)
		if err != nil && !isAuthError(err) {
			c.pageError(w, r, nil, err)
			return
		}
		if err != nil {
			target := "/login"
			switch {
			case errors.Is(err, errExpired):
				target += "?m=expired"
			case errors.Is(err, errUserChanged):
				target += "?m=changed"
			}
			http.Redirect(w, r, target, http.StatusSeeOther)
			return
		}
		if _, err := queryOf(r); err != nil { // every page: nothing silently dropped
			c.pageError(w, r, &id, err)
			return
		}
		if r.Method == http.MethodPost {
			if err := r.ParseForm(); err != nil {
				c.pageError(w, r, &id, formError(err))
				return
			}
		}
		if err := c.checkPost(r, &id, "csrf", r.PostFormValue); err != nil {
			c.pageError(w, r, &id, err)
			return
		}
		if operatorOnly && id.Role != Operator {
			c.pageError(w, r, &id, errForbidden)
			return
		}
		if err := h(w, r, &id); err != nil {
			c.pageError(w, r, &id, err)
		}
	}
}

// formError is the answer to a form that cannot be read: too large 413,
// malformed 400 (never its fields silently dropped).
func formError(err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return errTooLarge
	}
	return bad("the form is malformed (" + err.Error() + "): send it from the console's page")
}

// checkPost refuses a POST or DELETE of a session or proxy user whose
// CSRF token (read by get(name)) is not its own; a token's requests carry
// no cookie and need none.
func (c *Console) checkPost(r *http.Request, id *identity, name string, get func(string) string) error {
	if r.Method == http.MethodGet || r.Method == http.MethodHead || id.key() == "" {
		return nil
	}
	if !c.sessions.checkCSRF(id.key(), get(name)) {
		return errCSRF
	}
	return nil
}
