package console

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/mailsvc/mailsvc/internal/operator"
	"github.com/mailsvc/mailsvc/internal/store"
)

// Route is one route of the JSON API (api/openapi.yaml documents each).
type Route struct {
	Method, Path string
	// Operator is true for an action: a viewer gets 403.
	Operator bool
	handler  http.HandlerFunc
}

// Routes lists the API's routes, as the server registers them.
func Routes() []Route { return apiRoutes(&Console{}) }

// apiHandler is an API route's handler once the caller is known.
type apiHandler func(r *http.Request, id *identity) (any, error)

func apiRoutes(c *Console) []Route {
	rt := func(method, path string, op bool, h apiHandler) Route {
		return Route{Method: method, Path: path, Operator: op, handler: c.api(op, h)}
	}
	act := func(action string) apiHandler { return c.apiAct(action) }
	return []Route{
		rt("GET", "/api/v1/mails", false, c.apiSearch),
		rt("GET", "/api/v1/mails/{key}", false, c.apiMail),
		rt("GET", "/api/v1/mails/{key}/content", false, c.apiContent),
		rt("GET", "/api/v1/orders/{id}/mails", false, c.apiOrder),
		rt("GET", "/api/v1/overview", false, func(r *http.Request, _ *identity) (any, error) { return c.overviewOf(r.Context()), nil }),
		rt("GET", "/api/v1/suppressions", false, c.apiSuppressions),
		rt("GET", "/api/v1/audit", false, c.apiAudit),
		rt("POST", "/api/v1/mails/{key}/resend", true, act(actResend)),
		rt("POST", "/api/v1/mails/{key}/reconcile", true, act(actReconcile)),
		rt("POST", "/api/v1/providers/{name}/resume", true, act(actResume)),
		rt("POST", "/api/v1/suppressions", true, act(actSuppress)),
		rt("DELETE", "/api/v1/suppressions", true, act(actUnsuppress)),
		rt("POST", "/api/v1/dlq/replay", true, act(actReplay)),
	}
}

// api authenticates an API request (no credentials 401, an expired
// session 401), checks a session's X-CSRF-Token on POST and DELETE, the
// role of an action, then answers h's value or error as JSON.
func (c *Console) api(operatorOnly bool, h apiHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, err := c.authenticate(r)
		if err != nil && !isAuthError(err) {
			c.apiError(w, r, err)
			return
		}
		if err != nil {
			c.apiError(w, r, &httpError{http.StatusUnauthorized, "unauthenticated", err.Error()})
			return
		}
		if err := c.checkPost(r, &id, "X-CSRF-Token", r.Header.Get); err != nil {
			c.apiError(w, r, err)
			return
		}
		if operatorOnly && id.Role != Operator {
			c.apiError(w, r, errForbidden)
			return
		}
		if _, err := queryOf(r); err != nil { // every route: no filter or flag silently dropped
			c.apiError(w, r, err)
			return
		}
		v, err := h(r, &id)
		if err != nil {
			c.apiError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, v)
	}
}

func (c *Console) apiSearch(r *http.Request, _ *identity) (any, error) {
	v, err := queryOf(r)
	if err != nil {
		return nil, err
	}
	q, _, err := parseSearch(v)
	if err != nil {
		return nil, err
	}
	return c.deps.Store.SearchMails(r.Context(), q)
}

// mailAnswer is GET /api/v1/mails/{key}'s answer.
type mailAnswer struct {
	Mail     store.MailView        `json:"mail"`
	Verdict  string                `json:"verdict"`
	Report   []reportField         `json:"report"`
	Timeline []store.TimelineEntry `json:"timeline"`
}

type reportField struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

func (c *Console) apiMail(r *http.Request, _ *identity) (any, error) {
	d, err := c.mailView(r.Context(), r.PathValue("key"))
	if err != nil {
		return nil, err
	}
	if d.TimelineError != "" {
		_, err := c.deps.Store.MailTimeline(r.Context(), d.Mail.DedupeKey)
		return nil, err
	}
	a := mailAnswer{Mail: d.Mail, Verdict: d.Verdict, Timeline: d.Timeline}
	for _, f := range d.Report {
		a.Report = append(a.Report, reportField{f.Name, f.Value})
	}
	return a, nil
}

func (c *Console) apiContent(r *http.Request, _ *identity) (any, error) {
	return c.content(r.Context(), r.PathValue("key"))
}

func (c *Console) apiOrder(r *http.Request, _ *identity) (any, error) {
	id, err := pathOrder(r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	mails, err := c.deps.Store.MailsByOrder(r.Context(), id)
	if err != nil {
		return nil, err
	}
	if mails == nil {
		mails = []store.MailView{}
	}
	return map[string]any{"order_id": id, "mails": mails}, nil
}

// apiSuppressions lists the entries in force, or with ?address= that
// address's history.
func (c *Console) apiSuppressions(r *http.Request, _ *identity) (any, error) {
	v, err := queryOf(r)
	if err == nil {
		err = onlyParams(v, "address")
	}
	if err != nil {
		return nil, err
	}
	if _, ok := v["address"]; ok {
		in, err := parseAction(actSuppress, v)
		if err != nil {
			return nil, err
		}
		return c.deps.Store.SuppressionHistoryOf(r.Context(), in.Address)
	}
	list, err := c.deps.Store.Suppressions(r.Context())
	if list == nil {
		list = []store.Suppression{}
	}
	return map[string]any{"suppressions": list}, err
}

func (c *Console) apiAudit(r *http.Request, _ *identity) (any, error) {
	v, err := queryOf(r)
	if err != nil {
		return nil, err
	}
	q, err := auditQuery(v)
	if err != nil {
		return nil, err
	}
	entries, err := c.deps.Store.ListAudit(r.Context(), q)
	if entries == nil {
		entries = []store.AuditEntry{}
	}
	return map[string]any{"entries": entries}, err
}

// actionBody is the JSON body of every action.
type actionBody struct {
	Reason    string `json:"reason"`
	DryRun    bool   `json:"dry_run"`
	Delivered *bool  `json:"delivered,omitempty"` // reconcile
	Address   string `json:"address,omitempty"`   // suppressions
	Notice    bool   `json:"notice,omitempty"`    // resend: start the copy with the resend notice
}

// decodeBody reads an action's JSON body (one object; duplicate keys:
// the last wins, as encoding/json does): too large 413, cut short,
// malformed, with unknown fields or with data after the object 400.
func decodeBody(body io.Reader) (actionBody, error) {
	var b actionBody
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	err := dec.Decode(&b)
	if err == nil {
		if _, e := dec.Token(); !errors.Is(e, io.EOF) {
			return b, bad("the body must hold one JSON object: there is more after it")
		}
	}
	var mbe *http.MaxBytesError
	switch {
	case err == nil:
		return b, nil
	case errors.As(err, &mbe):
		return b, errTooLarge
	case errors.Is(err, io.ErrUnexpectedEOF):
		return b, bad("the body is cut short: it ends inside its JSON object")
	}
	return b, bad(fmt.Sprintf("the body must be a JSON object like {\"reason\": \"...\", \"dry_run\": false}: %v", err))
}

// apiAct runs action with the target from the path or the body.
func (c *Console) apiAct(action string) apiHandler {
	return func(r *http.Request, id *identity) (any, error) {
		b, err := decodeBody(r.Body)
		if err != nil {
			return nil, err
		}
		v := url.Values{"key": {r.PathValue("key")}, "provider": {r.PathValue("name")}, "address": {b.Address}}
		if b.Notice {
			v.Set("notice", "1")
		}
		if b.Delivered != nil {
			v.Set("outcome", map[bool]string{true: "delivered", false: "not-delivered"}[*b.Delivered])
		} else if action == actReconcile {
			return nil, bad("delivered: required (true or false)")
		}
		in, err := parseAction(action, v)
		if err != nil {
			return nil, err
		}
		if in.Reason, err = reasonOf(b.Reason); err != nil {
			return nil, err
		}
		res, err := c.run(r.Context(), operator.Actor{Name: id.Name, Via: "api"}, in, b.DryRun)
		if err != nil {
			return nil, err
		}
		return resultJSON(res)
	}
}

// resultJSON is an action's result as the API answers it: without an
// audit entry when none was written (a dry run), rather than one of id 0.
func resultJSON(res operator.Result) (map[string]any, error) {
	j, err := json.Marshal(res)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	if err := json.Unmarshal(j, &out); err != nil {
		return nil, err
	}
	if a, ok := out["audit"].(map[string]any); !ok || a["id"] == nil || a["id"] == float64(0) {
		delete(out, "audit")
	}
	return out, nil
}
