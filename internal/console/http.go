package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/operator"
	"github.com/mailsvc/mailsvc/internal/store"
)

// pageCSP is the policy of every console page: no script at all, styles
// and images from the console only, the preview frame from the console.
const pageCSP = "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; " +
	"frame-ancestors 'none'; frame-src 'self'; base-uri 'none'"

// previewCSP is the policy of a stored mail's HTML: its inline styles and
// data: images, nothing else (no script, no remote load), in a sandbox.
const previewCSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'self'; sandbox"

// secure sets the headers every response carries; the preview replaces
// the frame rules.
func secure(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", pageCSP)
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Cache-Control", "no-store")
		hd.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.ServeHTTP(w, r)
	})
}

// httpError is an answer other than 200: its status, the kind the API
// names, and the text a person reads.
type httpError struct {
	Status int
	Kind   string
	Msg    string
}

func (e *httpError) Error() string { return e.Msg }

func bad(msg string) *httpError { return &httpError{http.StatusBadRequest, "invalid", msg} }

// The answers of authentication and roles.
var (
	errForbidden = &httpError{http.StatusForbidden, "forbidden", "your role is viewer: only an operator may act (ask an operator, or for the operator role)"}
	errCSRF      = &httpError{http.StatusForbidden, "forbidden", "this form's security token is not your session's (a stale or foreign form): reload the page and try again"}
	errUsed      = &httpError{http.StatusConflict, "refused", "this confirmation was already used (or has expired): nothing was done again; open the action anew to repeat it"}
)

// classify maps an error of the store or of an action to its answer:
// bad input 400, no such thing 404, refused by the state 409, the
// database or broker 503, anything else 500 (its text kept from the
// person: it is logged).
func classify(err error) *httpError {
	var he *httpError
	if errors.As(err, &he) {
		return he
	}
	switch operator.KindOf(err) {
	case operator.KindInvalid:
		return bad(err.Error())
	case operator.KindNotFound:
		return &httpError{http.StatusNotFound, "not_found", err.Error()}
	case operator.KindRefused:
		return &httpError{http.StatusConflict, "refused", err.Error()}
	case operator.KindUnavailable:
		return unavailable(err)
	}
	var me *mailtype.Error
	switch {
	case errors.Is(err, store.ErrBadQuery), errors.Is(err, store.ErrInvalidAddress):
		return bad(err.Error())
	case errors.Is(err, store.ErrNotFound):
		return &httpError{http.StatusNotFound, "not_found", err.Error()}
	case errors.As(err, &me) && me.Reason == mailtype.ReasonDatabase, errors.Is(err, context.DeadlineExceeded):
		return unavailable(err)
	}
	return &httpError{http.StatusInternalServerError, "internal", "an unexpected error: it is logged; try again, or ask the service's operator"}
}

// unavailable is the answer when the database or the broker fails. Its
// text names neither (their hosts and users are the operator's business,
// not a viewer's): the error itself is logged (logAnswer).
func unavailable(error) *httpError {
	return &httpError{http.StatusServiceUnavailable, "unavailable",
		"the database or the broker is unavailable: try again shortly (the details are in mailsvc's log)"}
}

// writeJSON answers v as JSON.
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// apiError answers err as {"error": ..., "kind": ...}.
func (c *Console) apiError(w http.ResponseWriter, r *http.Request, err error) {
	he := classify(err)
	c.logAnswer("console api", r, he, err)
	if he.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="mailsvc console"`)
	}
	writeJSON(w, he.Status, map[string]string{"error": he.Msg, "kind": he.Kind})
}

// logAnswer logs a 5xx answer with the request's path (never its query
// string: it may hold an address) and the error's kind: 500 at error,
// the others (503: the database or broker down) at warn.
func (c *Console) logAnswer(msg string, r *http.Request, he *httpError, err error) {
	switch {
	case he.Status == http.StatusInternalServerError:
		c.deps.Log.Error(msg, "status", he.Status, "path", r.URL.Path, "kind", he.Kind, "error", err)
	case he.Status >= 500:
		c.deps.Log.Warn(msg, "status", he.Status, "path", r.URL.Path, "kind", he.Kind, "error", err)
	}
}

// errTooLarge is a body past Limits.MaxBodyBytes.
var errTooLarge = &httpError{http.StatusRequestEntityTooLarge, "too_large",
	fmt.Sprintf("the body is too large: at most %d bytes", Limits.MaxBodyBytes)}

// tooLarge answers 413 at once to a request whose Content-Length is past
// Limits.MaxBodyBytes (the API in its JSON shape), without waiting for a
// body that is never read, and closes the connection after it.
func (c *Console) tooLarge(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength <= Limits.MaxBodyBytes {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Connection", "close")
		if strings.HasPrefix(r.URL.Path, "/api/") {
			c.apiError(w, r, errTooLarge)
			return
		}
		http.Error(w, errTooLarge.Msg, errTooLarge.Status)
	})
}

// keyPath is a dedupe key as one path segment.
func keyPath(key string) string { return url.PathEscape(key) }
