package console

import (
	"context"
	"net/http"
	"net/url"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/operator"
	"github.com/mailsvc/mailsvc/internal/store"
)

// searchData is the search page's.
type searchData struct {
	Form       url.Values
	Keep       url.Values // the filters, carried by the pager's forms
	Statuses   []mailtype.Status
	Page       *store.MailPage
	Range      string
	Prev, Next int
	Error      string
	// MoreOpen opens the less used filters when one is set.
	MoreOpen bool
}

// search shows the form and, with filters, a page of mails. GET takes
// its filters from the query string but the recipient, which only the
// form's POST carries (an address in a URL lands in proxy and browser
// logs).
func (c *Console) search(w http.ResponseWriter, r *http.Request, id *identity) error {
	v, err := queryOf(r)
	if err != nil {
		return err
	}
	if r.Method == http.MethodPost {
		v = r.PostForm
	} else if v.Has("recipient") {
		return bad("recipient: send it with the search form (POST), not in the URL: an address in a URL lands in logs")
	}
	d := searchData{Form: v, Statuses: mailtype.Statuses}
	for _, k := range []string{"event_id", "provider_message_id", "template", "provider", "status", "since", "until", "sort"} {
		d.MoreOpen = d.MoreOpen || (v.Get(k) != "" && v.Get(k) != "newest")
	}
	filters := url.Values{}
	for k, vals := range v {
		if k != "csrf" && k != "page" && len(vals) > 0 && vals[0] != "" {
			filters[k] = vals
		}
	}
	if len(filters) == 0 && !v.Has("page") {
		c.render(w, http.StatusOK, "search", c.view(id, "Search", "search", d))
		return nil
	}
	q, n, err := parseSearch(v)
	if err != nil {
		return err
	}
	page, err := c.deps.Store.SearchMails(r.Context(), q)
	if err != nil {
		return err
	}
	d.Page, d.Range, d.Keep = &page, rangeText(page), filters
	if n > 1 {
		d.Prev = n - 1
	}
	if int64(page.Offset+len(page.Mails)) < page.Total {
		d.Next = n + 1
	}
	c.render(w, http.StatusOK, "search", c.view(id, "Search", "search", d))
	return nil
}

// mailData is the mail page's.
type mailData struct {
	Mail          store.MailView
	Verdict       string
	Report        []operator.Field
	Timeline      []store.TimelineEntry
	TimelineError string
	Content       *store.MailContent
	ContentError  string
}

// mailView reads what the mail page and GET /api/v1/mails/{key} show.
func (c *Console) mailView(ctx context.Context, raw string) (mailData, error) {
	key, err := pathKey(raw)
	if err != nil {
		return mailData{}, err
	}
	m, err := c.deps.Store.MailByKey(ctx, key)
	if err != nil {
		return mailData{}, err
	}
	now := c.deps.Now()
	d := mailData{Mail: m, Verdict: operator.Verdict(m, now), Report: operator.MailReport(m, now)}
	if d.Timeline, err = c.deps.Store.MailTimeline(ctx, key); err != nil {
		d.TimelineError = c.partError(err)
	}
	if m.EventID == "" {
		d.ContentError = errTombstone.Msg
	} else if content, err := c.deps.Store.MailContentByKey(ctx, key); err != nil {
		d.ContentError = c.partError(err)
	} else {
		d.Content = &content
	}
	return d, nil
}

func (c *Console) mail(w http.ResponseWriter, r *http.Request, id *identity) error {
	d, err := c.mailView(r.Context(), r.PathValue("key"))
	if err != nil {
		return err
	}
	c.render(w, http.StatusOK, "mail", c.view(id, "Mail "+d.Mail.DedupeKey, "search", d))
	return nil
}

// preview serves the stored HTML part under previewCSP, to be shown only
// in the mail page's sandboxed frame.
func (c *Console) preview(w http.ResponseWriter, r *http.Request, _ *identity) error {
	content, err := c.content(r.Context(), r.PathValue("key"))
	if err != nil {
		return err
	}
	h := w.Header()
	h.Set("Content-Security-Policy", previewCSP)
	h.Set("X-Frame-Options", "SAMEORIGIN")
	h.Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write([]byte(content.HTML))
	return nil
}

// errTombstone is the content of a mail that never had any.
var errTombstone = &httpError{http.StatusNotFound, "not_found",
	"this mail has no content: a tombstone (the order was cancelled before its confirmation arrived)"}

// content reads the stored mail of the raw key: a tombstone has none
// (404).
func (c *Console) content(ctx context.Context, raw string) (store.MailContent, error) {
	key, err := pathKey(raw)
	if err != nil {
		return store.MailContent{}, err
	}
	m, err := c.deps.Store.MailByKey(ctx, key)
	if err != nil {
		return store.MailContent{}, err
	}
	if m.EventID == "" {
		return store.MailContent{}, errTombstone
	}
	return c.deps.Store.MailContentByKey(ctx, key)
}

// orderMail is one row of the order page.
type orderMail struct {
	Mail    store.MailView
	Verdict string
}

func (c *Console) order(w http.ResponseWriter, r *http.Request, id *identity) error {
	orderID, err := pathOrder(r.PathValue("id"))
	if err != nil {
		return err
	}
	mails, err := c.deps.Store.MailsByOrder(r.Context(), orderID)
	if err != nil {
		return err
	}
	rows := make([]orderMail, len(mails))
	for i, m := range mails {
		rows[i] = orderMail{m, operator.Verdict(m, c.deps.Now())}
	}
	c.render(w, http.StatusOK, "order", c.view(id, "Order "+orderID, "search",
		struct {
			OrderID string
			Mails   []orderMail
		}{orderID, rows}))
	return nil
}
