package console

import (
	"fmt"
	"net/http"
	"strings"
)

// routes registers every page and API route; Routes lists the API's.
func (c *Console) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /static/console.css", staticFile("static/console.css"))
	mux.HandleFunc("GET /login", c.loginForm)
	mux.HandleFunc("POST /login", c.login)
	mux.HandleFunc("POST /logout", c.page(false, c.logout))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/search", http.StatusSeeOther) })
	mux.HandleFunc("GET /search", c.page(false, c.search))
	mux.HandleFunc("POST /search", c.page(false, c.search))
	mux.HandleFunc("GET /mails/{key}", c.page(false, c.mail))
	mux.HandleFunc("GET /mails/{key}/preview", c.page(false, c.preview))
	mux.HandleFunc("GET /orders/{id}", c.page(false, c.order))
	mux.HandleFunc("GET /overview", c.page(false, c.overview))
	mux.HandleFunc("GET /suppressions", c.page(false, c.suppressions))
	mux.HandleFunc("POST /suppressions", c.page(false, c.suppressions))
	mux.HandleFunc("GET /audit", c.page(false, c.audit))
	mux.HandleFunc("GET /actions/{action}", c.page(true, c.confirm))
	mux.HandleFunc("POST /actions/{action}/confirm", c.page(true, c.confirm))
	mux.HandleFunc("POST /actions/{action}", c.page(true, c.act))
	for _, rt := range apiRoutes(c) {
		mux.HandleFunc(rt.Method+" "+rt.Path, rt.handler)
	}
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		if allow := allowed(mux, r); len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			c.apiError(w, r, &httpError{http.StatusMethodNotAllowed, "method_not_allowed",
				fmt.Sprintf("%s is not allowed on %s: use %s", r.Method, r.URL.Path, strings.Join(allow, " or "))})
			return
		}
		c.apiError(w, r, &httpError{http.StatusNotFound, "not_found", "no such API route: " + r.Method + " " + r.URL.Path})
	})
	return mux
}

// allowed lists the methods of the API routes that match r's path.
func allowed(mux *http.ServeMux, r *http.Request) []string {
	var out []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := mux.Handler(probe); pattern != "/api/" && pattern != "" {
			out = append(out, m)
		}
	}
	return out
}

// staticFile serves one embedded file, and lets it be cached (it holds
// nothing secret); nothing else under /static/ is served (no listing).
func staticFile(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		http.ServeFileFS(w, r, staticFS, name)
	})
}
