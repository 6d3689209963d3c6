package store_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// searchBundle is a schema with six mails received an hour apart, the
// first the oldest: s1 .. s6.
type searchBundle struct {
	sc      *storetest.Schema
	base    time.Time
	eventS2 string
}

func setupSearch(t *testing.T) searchBundle {
	t.Helper()
	sc := storetest.New(t)
	b := searchBundle{sc: sc, base: time.Date(2026, 11, 1, 8, 0, 0, 0, time.UTC), eventS2: uuid.NewString()}
	for i, m := range []struct{ order, to, template, status, provider, pmid string }{
		{"41", "Ann@Example.COM", "order_confirmed", "sent", "resend", "em_1"},
		{"42", "ann@example.com", "order_confirmed", "sent", "smtp", "250 2.0.0 Ok: queued as 4F2"},
		{"42", "ann@example.com", "order_cancelled", "failed", "smtp", ""},
		{"43", "bob@example.com", "order_confirmed", "unknown", "resend", "em_4"},
		{"44", "carol@example.org", "order_confirmed", "pending", "", ""},
		{"42", "", "order_confirmed", "cancelled", "", ""},
	} {
		key := "s" + string(rune('1'+i))
		sc.Exec(t, `INSERT INTO mail (event_id, dedupe_key, order_id, template, to_email, subject, status, provider,
			provider_message_id, created_at, locked_until, sent_at)
			VALUES (CASE WHEN $4 <> '' THEN gen_random_uuid() END, $1, $2, $3, $4, 'Order ' || $2, $5, NULLIF($6, ''), NULLIF($7, ''), $8::timestamptz,
			CASE WHEN $5 = 'sending' THEN now() END, CASE WHEN $5 = 'sent' THEN $8::timestamptz + interval '1 second' END)`,
			key, m.order, m.template, m.to, m.status, m.provider, m.pmid, b.base.Add(time.Duration(i)*time.Hour))
	}
	sc.Exec(t, `INSERT INTO outbox (event_id, exchange, routing_key, event_type, dedupe_key, payload)
		VALUES ($1, 'mail.events', 'email.sent', 'EmailSent', 's2', '{}')`, b.eventS2)
	return b
}

func (b searchBundle) keys(t *testing.T, q store.MailQuery) []string {
	t.Helper()
	if q.Limit == 0 {
		q.Limit = 10
	}
	p, err := b.sc.Store.SearchMails(ctx(t), q)
	require.NoError(t, err)
	return keysOf(p.Mails)
}

func TestSearchMailsFilters(t *testing.T) {
	t.Parallel()
	b := setupSearch(t)
	inputEvent := b.sc.QueryStrings(t, `SELECT event_id::text FROM mail WHERE dedupe_key = 's4'`)[0]
	for _, c := range []struct {
		name string
		q    store.MailQuery
		want []string
	}{
		{"all, newest first", store.MailQuery{}, []string{"s6", "s5", "s4", "s3", "s2", "s1"}},
		{"oldest first", store.MailQuery{Oldest: true, Limit: 3}, []string{"s1", "s2", "s3"}},
		{"order", store.MailQuery{OrderID: "42"}, []string{"s6", "s3", "s2"}},
		{"recipient in any case", store.MailQuery{Recipient: "ANN@example.com"}, []string{"s3", "s2", "s1"}},
		{"dedupe key", store.MailQuery{DedupeKey: "s4"}, []string{"s4"}},
		{"input event id", store.MailQuery{EventID: inputEvent}, []string{"s4"}},
		{"feedback event id", store.MailQuery{EventID: b.eventS2}, []string{"s2"}},
		{"unknown event id", store.MailQuery{EventID: uuid.NewString()}, nil},
		{"provider message id", store.MailQuery{ProviderMessageID: "em_4"}, []string{"s4"}},
		{"template", store.MailQuery{Template: "order_cancelled"}, []string{"s3"}},
		{"provider", store.MailQuery{Provider: "smtp"}, []string{"s3", "s2"}},
		{"statuses", store.MailQuery{Statuses: []mailtype.Status{mailtype.StatusFailed, mailtype.StatusCancelled}}, []string{"s6", "s3"}},
		{"since until", store.MailQuery{Since: b.base.Add(time.Hour), Until: b.base.Add(3 * time.Hour)}, []string{"s3", "s2"}},
		{"all together", store.MailQuery{OrderID: "42", Recipient: "ann@EXAMPLE.com", Statuses: []mailtype.Status{mailtype.StatusSent},
			Provider: "smtp", Template: "order_confirmed", Since: b.base}, []string{"s2"}},
	} {
		require.Equal(t, c.want, b.keys(t, c.q), c.name)
	}
}

func TestSearchMailsPagesAndCounts(t *testing.T) {
	t.Parallel()
	b := setupSearch(t)
	page := func(q store.MailQuery) store.MailPage {
		t.Helper()
		p, err := b.sc.Store.SearchMails(ctx(t), q)
		require.NoError(t, err)
		return p
	}
	p := page(store.MailQuery{Limit: 4})
	require.Equal(t, []string{"s6", "s5", "s4", "s3"}, keysOf(p.Mails))
	require.Equal(t, store.MailPage{Mails: p.Mails, Total: 6, Limit: 4}, p)
	p = page(store.MailQuery{Limit: 4, Offset: 4})
	require.Equal(t, []string{"s2", "s1"}, keysOf(p.Mails))
	require.Equal(t, int64(6), p.Total)
	p = page(store.MailQuery{Limit: 4, Offset: 40})
	require.Equal(t, []store.MailSummary{}, p.Mails, "a page past the end: empty, not nil")
	require.Equal(t, int64(6), p.Total)

	got := page(store.MailQuery{DedupeKey: "s2", Limit: 1}).Mails[0]
	require.Equal(t, store.MailSummary{DedupeKey: "s2", OrderID: "42", Template: "order_confirmed", Status: mailtype.StatusSent,
		Provider: "smtp", ProviderMessageID: "250 2.0.0 Ok: queued as 4F2", CreatedAt: got.CreatedAt, UpdatedAt: got.UpdatedAt,
		ToEmail: "ann@example.com", Subject: "Order 42", Revision: 1, SentAt: got.SentAt}, got)
	require.True(t, got.CreatedAt.Equal(b.base.Add(time.Hour)))
	require.True(t, got.SentAt.Equal(b.base.Add(time.Hour+time.Second)))

	// More than CountCap matches: the count stops there.
	b.sc.Exec(t, `INSERT INTO mail (dedupe_key, order_id, template, status)
		SELECT 'bulk-' || g, g::text, 'bulk', 'pending' FROM generate_series(1, $1::int) g`, store.CountCap+1)
	p = page(store.MailQuery{Template: "bulk", Limit: 2})
	require.Len(t, p.Mails, 2)
	require.Equal(t, int64(store.CountCap), p.Total)
	require.True(t, p.TotalCapped)
}

func TestSearchMailsRefusesBadQueries(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	now := time.Now()
	for _, c := range []struct {
		q    store.MailQuery
		want string
	}{
		{store.MailQuery{}, "invalid search: limit must be 1 to 200, got 0"},
		{store.MailQuery{Limit: 201}, "invalid search: limit must be 1 to 200, got 201"},
		{store.MailQuery{Limit: 1, Offset: -1}, "invalid search: offset must not be negative, got -1"},
		{store.MailQuery{Limit: 1, Offset: 10001}, "invalid search: offset 10001 is past the 10000 mails a search pages through: narrow the search (a time range, a status, a template)"},
		{store.MailQuery{Limit: 1, EventID: "42"}, `invalid search: event id must be a UUID, got "42"`},
		{store.MailQuery{Limit: 1, Statuses: []mailtype.Status{"x'; DROP TABLE mail; --"}},
			`invalid search: status must be one of [pending sending sent failed cancelled unknown held], got "x'; DROP TABLE mail; --"`},
		{store.MailQuery{Limit: 1, Since: now, Until: now.Add(-time.Hour)}, "invalid search: since (" + now.Format(time.RFC3339) +
			") must be before until (" + now.Add(-time.Hour).Format(time.RFC3339) + ")"},
		{store.MailQuery{Limit: 1, OrderID: "4\x002"}, `invalid search: order_id: contains a NUL byte: "4\x002"`},
		{store.MailQuery{Limit: 1, OrderID: "\xff"}, `invalid search: order_id: not valid UTF-8: "\xff"`},
		{store.MailQuery{Limit: 1, Template: "\xff"}, `invalid search: template: not valid UTF-8: "\xff"`},
		{store.MailQuery{Limit: 1, Provider: "smtp\x00"}, `invalid search: provider: contains a NUL byte: "smtp\x00"`},
		{store.MailQuery{Limit: 1, ProviderMessageID: "\xc3"}, `invalid search: provider_message_id: not valid UTF-8: "\xc3"`},
		{store.MailQuery{Limit: 1, Recipient: "a\x00@example.com"}, `invalid search: recipient: contains a NUL byte: "a\x00@example.com"`},
		{store.MailQuery{Limit: 1, DedupeKey: "k\xff"}, `invalid search: dedupe_key: not valid UTF-8: "k\xff"`},
	} {
		_, err := sc.Store.SearchMails(ctx(t), c.q)
		require.True(t, errors.Is(err, store.ErrBadQuery), "%+v: %v", c.q, err)
		require.EqualError(t, err, "search mails: "+c.want)
	}
	for in, want := range map[string]string{
		"4\x002": `read mails of order: invalid search: order_id: contains a NUL byte: "4\x002"`,
		"\xff":   `read mails of order: invalid search: order_id: not valid UTF-8: "\xff"`,
		" \t":    "read mails of order: invalid search: order_id: empty",
	} {
		_, err := sc.Store.MailsByOrder(ctx(t), in)
		require.ErrorIs(t, err, store.ErrBadQuery, "%q", in)
		require.EqualError(t, err, want)
	}
}

// The support reads work in every pgx query exec mode (a pooler in front
// of PostgreSQL needs exec or simple_protocol).
func TestSupportReadsInEveryExecMode(t *testing.T) {
	t.Parallel()
	b := setupSearch(t)
	q := store.MailQuery{Recipient: "ANN@example.com", EventID: b.eventS2, Since: b.base, Until: b.base.Add(24 * time.Hour),
		Statuses: []mailtype.Status{mailtype.StatusSent}, Limit: 10}
	for _, mode := range storetest.ExecModes {
		st := b.sc.OpenInMode(t, mode)
		p, err := st.SearchMails(ctx(t), q)
		require.NoError(t, err, mode)
		require.Equal(t, []string{"s2"}, keysOf(p.Mails), mode)
		entries, err := st.MailTimeline(ctx(t), "s2")
		require.NoError(t, err, mode)
		require.Len(t, entries, 4, "%s: received, the send, the outcome, the EmailSent", mode)
		_, err = st.MailContentByKey(ctx(t), "s2")
		require.NoError(t, err, mode)
		o, err := st.Overview(ctx(t))
		require.NoError(t, err, mode)
		require.Equal(t, int64(2), o.Counts[mailtype.StatusSent], mode)
	}
}
