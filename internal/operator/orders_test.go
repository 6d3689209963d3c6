package operator_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/operator"
	"github.com/mailsvc/mailsvc/internal/store"
)

func TestReadOrderLines(t *testing.T) {
	t.Parallel()
	got, err := operator.ReadOrderLines(strings.NewReader("\uFEFF# header\n\n 41\u00a0\nA-7\t2\n41\n"))
	require.NoError(t, err)
	require.Equal(t, []operator.OrderLine{{Line: 3, OrderID: "41"}, {Line: 4, OrderID: "A-7", Revision: 2}, {Line: 5, OrderID: "41"}}, got)

	for in, want := range map[string]string{
		"41\n42 0\n":             `line 2: not ORDER or ORDER REVISION (a revision is a whole number from 1): "42 0"`,
		"41\n\xff\n":             "line 2: not an order id: not valid UTF-8",
		"41\nx\x01y\n":           "line 2: not an order id: control character U+0001",
		strings.Repeat("9", 201): "line 1: not an order id: 201 bytes, more than 200",
	} {
		_, err := operator.ReadOrderLines(strings.NewReader(in))
		require.ErrorIs(t, err, operator.ErrInvalidInput, in)
		require.ErrorContains(t, err, want)
	}
}

// A republish that selects nothing or cannot mean anything is refused
// before anything is read, and audited; a dry run writes no row; without
// a broker the action is refused.
func TestRepublishRefusals(t *testing.T) {
	t.Parallel()
	b := setupActions(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _, err := b.a.Republish(ctx, ann, operator.RepublishRequest{}, "why", false, nil)
	require.Equal(t, operator.KindInvalid, operator.KindOf(err))
	since := time.Date(2026, 5, 2, 0, 0, 0, 0, time.UTC)
	_, _, err = b.a.Republish(ctx, ann, operator.RepublishRequest{Since: since, Until: since.Add(-time.Hour)}, "why", true, nil)
	require.EqualError(t, err, "an empty time range: --since 2026-05-02T00:00:00Z is not before --until 2026-05-01T23:00:00Z (the input's fault: nothing was looked up)")
	res, events, err := b.a.Republish(ctx, ann, operator.RepublishRequest{OrderIDs: []string{" 9 "}, KeptFor: time.Hour}, "why", false, nil)
	require.NoError(t, err)
	require.Empty(t, events)
	require.Equal(t, "no published feedback event matches (published events are kept for retention.window, 1h0m0s)", res.Summary)

	b.sc.Exec(t, `INSERT INTO outbox (event_id, exchange, routing_key, event_type, order_id, dedupe_key, payload, published_at)
		VALUES (gen_random_uuid(), 'mail.events', 'email.sent', 'EmailSent', '9', 'order-confirmed:9', '{}', now())`)
	_, _, err = b.a.Republish(ctx, ann, operator.RepublishRequest{OrderIDs: []string{"9"}}, "why", false, nil)
	require.True(t, errors.Is(err, operator.ErrNoBroker))
	require.Equal(t, []store.AuditEntry{
		{Actor: "ann", Via: "console", Action: "outbox-republish", Target: "outbox: (nothing selected)", Reason: "why", Result: "refused",
			Detail: "nothing selected; give --order, --orders-from, --since, --until or --type (the input's fault: nothing was looked up)"},
		{Actor: "ann", Via: "console", Action: "outbox-republish", Target: "outbox: orders 9", Reason: "why", Result: "done", Detail: res.Summary},
		{Actor: "ann", Via: "console", Action: "outbox-republish", Target: "outbox: orders 9", Reason: "why", Result: "refused",
			Detail: "no broker configured to republish to (amqp.url)"},
	}, b.audits(t))
}
