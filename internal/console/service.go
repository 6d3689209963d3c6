package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
)

// overviewData is the service page's and GET /api/v1/overview's.
type overviewData struct {
	// Overview is without its Providers (Providers lists them).
	Overview       *overviewFigures `json:"overview"`
	Error          string           `json:"overview_error,omitempty"`
	Providers      []providerView   `json:"providers"`
	ProvidersError string           `json:"providers_error,omitempty"`
	// DLQDepth is nil when unknown (no broker information here).
	DLQDepth *int              `json:"dead_letter_depth"`
	DLQ      string            `json:"-"`
	DLQKnown bool              `json:"-"`
	Statuses []mailtype.Status `json:"-"`
}

// overviewFigures is store.Overview without its providers: the nil
// field, omitted, hides the embedded one's "providers".
type overviewFigures struct {
	store.Overview
	Providers *struct{} `json:"providers,omitempty"`
}

// providerView is one provider's state as the API shows it: snake_case
// names, a time not set null.
type providerView struct {
	Provider    string     `json:"provider"`
	Paused      bool       `json:"paused"`
	Reason      string     `json:"reason"`
	PausedAt    *time.Time `json:"paused_at"`
	PausedUntil *time.Time `json:"paused_until"`
	ResumedAt   *time.Time `json:"resumed_at"`
	Error       string     `json:"error"`
	Failures    int        `json:"failures"`
	ProbeBy     string     `json:"probe_by"`
}

// timeOrNil is nil for the zero time.
func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// providerViews keeps the configured providers' states (all when
// configured is nil), each listed once, in configured order.
func providerViews(states []store.ProviderState, configured []string) []providerView {
	out := []providerView{}
	seen := map[string]bool{}
	for _, p := range states {
		if seen[p.Provider] || (configured != nil && !slices.Contains(configured, p.Provider)) {
			continue
		}
		seen[p.Provider] = true
		out = append(out, providerView{Provider: p.Provider, Paused: p.Paused(), Reason: string(p.Reason),
			PausedAt: timeOrNil(p.PausedAt), PausedUntil: timeOrNil(p.PausedUntil), ResumedAt: timeOrNil(p.ResumedAt),
			Error: p.Error, Failures: p.Failures, ProbeBy: p.ProbeBy})
	}
	if configured != nil {
		slices.SortStableFunc(out, func(a, b providerView) int {
			return slices.Index(configured, a.Provider) - slices.Index(configured, b.Provider)
		})
	}
	return out
}

// overviewOf reads the figures; a part that fails is reported in its
// place, the others still shown.
func (c *Console) overviewOf(ctx context.Context) overviewData {
	d := overviewData{Statuses: mailtype.Statuses, DLQ: "unknown (no broker information on this replica)"}
	if o, err := c.deps.Store.Overview(ctx); err != nil {
		d.Error = c.partError(err)
	} else {
		d.Overview = &overviewFigures{Overview: o}
	}
	if p, err := c.deps.Store.ProviderStates(ctx); err != nil {
		d.ProvidersError = c.partError(err)
	} else {
		d.Providers = providerViews(p, c.deps.Providers)
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
	if errors.Is(err, store.ErrBadQuery) {
		return bad(err.Error())
	}
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
