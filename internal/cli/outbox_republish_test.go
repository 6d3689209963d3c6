package cli

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/relay"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// An order service lost its projection: republish by order sends the
// events still kept, in their order, with their own event ids and marked;
// a consumer that dedupes on message_id counts each once, however often
// they arrive. Rows past retention.window and unpublished rows are not
// sent; a dry run publishes nothing and writes no audit row.
func TestOutboxRepublishByOrder(t *testing.T) {
	t.Parallel()
	o := newOpsEnv(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fb := func(order string, typ mailtype.EventType) store.Feedback {
		return store.Feedback{Type: typ, DedupeKey: mailtype.ConfirmationKey(order), OrderID: order,
			Template: "order_confirmed", Status: mailtype.StatusSent, Attempts: 1, Provider: "smtp"}
	}
	require.NoError(t, storetest.InsertOutbox(ctx, o.sc.Store, fb("41", mailtype.EmailSent), fb("42", mailtype.EmailSent),
		fb("41", mailtype.EmailDelivered), fb("43", mailtype.EmailSent), fb("44", mailtype.EmailSent)))
	o.sc.Exec(t, `UPDATE outbox SET exchange = $1, published_at = now() - interval '1 hour' WHERE order_id IN ('41', '42')`, o.names.EventsExchange)
	o.sc.Exec(t, `UPDATE outbox SET exchange = $1, published_at = now() - interval '20 days' WHERE order_id = '44'`, o.names.EventsExchange)
	seen := brokertest.Observe(t, o.names.EventsExchange, o.names.EventsQueue, "#")

	out, err := o.run(t, "outbox", "republish", "--order", "41", "--order", "43", "--order", "44", "--dry-run")
	require.NoError(t, err)
	require.Contains(t, out, "would republish EmailSent event_id=")
	require.Contains(t, out, "would republish 2 feedback events of 1 orders (EmailSent 1, EmailDelivered 1) (dry run: nothing published)\n")
	require.EqualValues(t, 0, o.sc.QueryInt(t, `SELECT count(*) FROM audit_log`))

	out, _, err = o.runIO(t, "\uFEFF# lost projection\n41\u00a0\n44\n", "outbox", "republish", "--orders-from", "-", "--type", "EmailDelivered", "--dry-run")
	require.NoError(t, err)
	require.Contains(t, out, "would republish 1 feedback events of 1 orders (EmailDelivered 1) (dry run: nothing published)\n")

	want := o.sc.QueryStrings(t, `SELECT event_id::text FROM outbox WHERE order_id = '41' ORDER BY id`)
	for run := 1; run <= 2; run++ {
		out, err = o.run(t, "outbox", "republish", "--order", "41", "--order", "43", "--order", "44", "--reason", "INC-1 projection wiped")
		require.NoError(t, err)
		require.Contains(t, out, "republished 2 feedback events of 1 orders (EmailSent 1, EmailDelivered 1) with their own event ids, marked x-mailsvc-republish: true\n")
	}
	got := seen.WaitFor(t, 4)
	require.Len(t, got, 4)
	dedup := map[string]int{}
	var order []string
	for _, m := range got {
		require.Equal(t, true, m.Headers[relay.HeaderRepublish])
		require.NotEmpty(t, m.Headers[relay.HeaderOriginalPublishedAt])
		require.Contains(t, string(m.Body), `"event_id": "`+m.MessageID+`"`)
		if dedup[m.MessageID]++; dedup[m.MessageID] == 1 {
			order = append(order, m.MessageID)
		}
	}
	require.Equal(t, want, order, "the order's events, once each after dedupe, in write order")
	require.Equal(t, map[string]int{want[0]: 2, want[1]: 2}, dedup)
	require.EqualValues(t, 2, o.sc.QueryInt(t, `SELECT count(*) FROM audit_log WHERE action = 'outbox-republish'
		AND target = 'outbox: orders 41,43,44' AND result = 'done' AND reason = 'INC-1 projection wiped'`))

	o.seed(t, "order-confirmed:41", "41", mailtype.StatusSent)
	out, err = o.run(t, "mail", "show", "order-confirmed:41")
	require.NoError(t, err)
	require.Regexp(t, `republish: +EmailSent `+want[0]+`: can be published again until \S+ \(retention.window 336h0m0s\); `+
		"`mailsvc outbox republish --order 41`", out)

	_, err = o.run(t, "outbox", "republish")
	var ee *ExitError
	require.True(t, errors.As(err, &ee))
	require.Equal(t, ExitInvalid, ee.Code)
	require.ErrorContains(t, err, "nothing selected; give --order, --orders-from, --since, --until or --type")
	_, err = o.run(t, "outbox", "republish", "--type", "OrderConfirmed")
	require.ErrorContains(t, err, `not a feedback event type: "OrderConfirmed"`)
	_, err = o.run(t, "outbox", "republish", "--since", "yesterday")
	require.ErrorContains(t, err, `--since "yesterday": not an RFC 3339 time`)
}
