package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
)

// overviewData is the service page's and GET /api/v1/overview's.
type overviewData struct {
	Overview       *store.Overview       `json:"overview"`
	Error          string                `json:"overview_error,omitempty"`
	Providers      []store.ProviderState `json:"providers"`
	ProvidersError string                `json:"providers_error,omitempty"`
	// DLQDepth is nil when unknown (no broker information here).
	DLQDepth *int              `json:"dead_letter_depth"`
	DLQ      string            `json:"-"`
	DLQKnown bool              `json:"-"`
	Statuses []mailtype.Status `json:"-"`
}

// overviewOf reads the figures; a part that fails is reported in its
// place, the others still shown.
func (c *Console) overviewOf(ctx context.Context) overviewData {
	d := overviewData{Statuses: mailtype.Statuses, DLQ: "unknown (no broker information on this replica)"}
	if o, err := c.deps.Store.Overview(ctx); err != nil {
		d.Error = c.partError(err)
	} else {
		d.Overview = &o
	}
	if p, err := c.deps.Store.ProviderStates(ctx); err != nil {
		d.ProvidersError = c.partError(err)
	} else {
		d.Providers = p
	}
	if c.deps.DLQDepth != nil {
		if n, ok := c.deps.DLQDepth(ctx); ok {
			d.DLQDepth, d.DLQKnown, d.DLQ = &n, true, group(int64(n))+" messages"
		}
	}
	return d
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request, id *identity) error {
	c.render(w, http.StatusOK, "overview", c.view(id, "Service", "overview", c.overviewOf(r.Context())))
	return nil
}

// maxListed bounds the suppression list shown on the page.
const maxListed = 500

// suppressionData is the suppressions page's.
type suppressionData struct {
	Address string
	History *store.SuppressionHistory
	List    []store.Suppression
	More    bool
	Error   string
}

// suppressions lists the entries in force and, for a POST, the history
// of one address (POST: an address stays out of the URL).
func (c *Console) suppressions(w http.ResponseWriter, r *http.Request, id *identity) error {
	var d suppressionData
	if r.Method == http.MethodPost {
		a, err := parseAction(actSuppress, r.PostForm)
		if err != nil {
			return err
		}
		d.Address = a.Address
		h, err := c.deps.Store.SuppressionHistoryOf(r.Context(), a.Address)
		switch he := classify(err); {
		case err == nil:
			d.History = &h
		case he.Status == http.StatusNotFound:
			d.Error = a.Address + " was never suppressed"
		default:
			return err
		}
	}
	list, err := c.deps.Store.Suppressions(r.Context())
	if err != nil {
		return err
	}
	if len(list) > maxListed {
		list, d.More = list[:maxListed], true
	}
	d.List = list
	c.render(w, http.StatusOK, "suppressions", c.view(id, "Suppressions", "suppressions", d))
	return nil
}

// auditParams are the audit log's filters.
var auditParams = []string{"actor", "action", "target", "dedupe_key", "limit"}

// auditQuery reads the audit filters of v: an unknown or repeated one is
// refused.
func auditQuery(v url.Values) (store.AuditQuery, error) {
	q := store.AuditQuery{Limit: 200}
	if err := onlyParams(v, auditParams...); err != nil {
		return q, err
	}
	for _, name := range auditParams {
		if len(v[name]) > 1 {
			return q, bad(fmt.Sprintf("%s: given %d times: give it once", name, len(v[name])))
		}
	}
	get := v.Get
	for _, f := range []struct {
		name string
		dst  *string
	}{{"actor", &q.Actor}, {"action", &q.Action}, {"target", &q.Target}, {"dedupe_key", &q.DedupeKey}} {
		s := get(f.name)
		if len(s) > maxField {
			return q, bad(f.name + ": longer than 1024 bytes")
		}
		*f.dst = s
	}
	if l := get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 1000 {
			return q, bad("limit: a number from 1 to 1000, got " + strconv.Quote(l))
		}
		q.Limit = n
	}
	return q, nil
}

func (c *Console) audit(w http.ResponseWriter, r *http.Request, id *identity) error {
	v, err := queryOf(r)
	if err != nil {
		return err
	}
	q, err := auditQuery(v)
	if err != nil {
		return err
	}
	entries, err := c.deps.Store.ListAudit(r.Context(), q)
	d := struct {
		Query   store.AuditQuery
		Entries []store.AuditEntry
		Error   string
	}{Query: q, Entries: entries}
	if err != nil {
		d.Error = c.partError(err)
	}
	c.render(w, http.StatusOK, "audit", c.view(id, "Audit log", "audit", d))
	return nil
}
