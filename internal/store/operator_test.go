package store_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// seedMail inserts one mail row with content in status st and returns its key.
func seedMail(t *testing.T, sc *storetest.Schema, key, orderID string, st mailtype.Status) string {
	t.Helper()
	sc.Exec(t, `INSERT INTO mail (event_id, dedupe_key, order_id, template, locale, to_email, payload,
		subject, body_text, body_html, message_id, status, attempts, sends, locked_until, provider, provider_message_id, last_error, sent_at)
		VALUES (gen_random_uuid(), $1, $2, 'order_confirmed', 'vi', 'b@example.com', '{"order_id":"42"}',
		'Xác nhận đơn hàng', 'text', '<p>html</p>', $3, $4, 2, 2,
		CASE WHEN $4 = 'sending' THEN now() + interval '1 minute' END, 'smtp', 'pm-1', 'timeout (ambiguous): reset',
		CASE WHEN $4 = 'sent' THEN now() END)`,
		key, orderID, mailtype.MessageID(key, "shop.example"), string(st))
	return key
}

func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestResendCopiesContentUnderANewKey(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	key := seedMail(t, sc, "order-confirmed:42", "42", mailtype.StatusSent)
	sc.Exec(t, `UPDATE mail SET from_addr = 'Shop <orders@shop.example>', to_name = 'B', reply_to = 'help@shop.example',
		idempotency_key = 'ns:order-confirmed:42' WHERE dedupe_key = $1`, key)

	newKey, err := sc.Store.Resend(ctx(t), key, "shop.example", "ns")
	require.NoError(t, err)
	require.Equal(t, "order-confirmed:42:resend:1", newKey)
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE dedupe_key = $1 AND from_addr = 'Shop <orders@shop.example>'
		AND to_name = 'B' AND reply_to = 'help@shop.example' AND idempotency_key = 'ns:order-confirmed:42:resend:1'`, newKey),
		"a resend keeps the original's envelope and gets its own idempotency key")
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE dedupe_key = $1 AND lane = 1`, newKey),
		"someone is waiting for a resend: the priority lane")
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE dedupe_key = $1 AND lane = 0`, key))

	orig, err := sc.Store.MailByKey(ctx(t), key)
	require.NoError(t, err)
	res, err := sc.Store.MailByKey(ctx(t), newKey)
	require.NoError(t, err)
	require.Equal(t, mailtype.StatusSent, orig.Status, "the original is never touched")
	require.Equal(t, 2, orig.Attempts)
	require.Equal(t, mailtype.StatusPending, res.Status)
	require.Equal(t, 0, res.Attempts)
	require.Equal(t, orig.Subject, res.Subject)
	require.Equal(t, orig.ToEmail, res.ToEmail)
	require.Equal(t, orig.OrderID, res.OrderID)
	require.Equal(t, mailtype.MessageID(newKey, "shop.example"), res.MessageID)
	require.NotEqual(t, orig.MessageID, res.MessageID)
	require.NotEmpty(t, res.EventID)
	require.NotEqual(t, orig.EventID, res.EventID)
	require.Equal(t, "", res.ProviderMessageID)
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE body_text = 'text' AND body_html = '<p>html</p>' AND dedupe_key = $1`, newKey))

	// Once the first resend ended, the next one takes number 2.
	sc.Exec(t, `UPDATE mail SET status = 'failed' WHERE dedupe_key = $1`, newKey)
	second, err := sc.Store.Resend(ctx(t), key, "shop.example", "ns")
	require.NoError(t, err)
	require.Equal(t, "order-confirmed:42:resend:2", second)
	require.EqualValues(t, 3, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE order_id = '42'`))
}

func TestResendRefusals(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	for _, st := range []mailtype.Status{mailtype.StatusPending, mailtype.StatusSending, mailtype.StatusUnknown, mailtype.StatusCancelled} {
		key := seedMail(t, sc, "k-"+string(st), "1", st)
		_, err := sc.Store.Resend(ctx(t), key, "shop.example", "ns")
		var se *store.StateError
		require.ErrorAs(t, err, &se, st)
		require.ErrorIs(t, err, store.ErrWrongState)
		require.Equal(t, st, se.Status)
	}
	_, err := sc.Store.Resend(ctx(t), "no-such-key", "shop.example", "ns")
	require.ErrorIs(t, err, store.ErrNotFound)

	sc.Exec(t, `INSERT INTO mail (dedupe_key, order_id, template, status, cancel_event_id) VALUES ('order-confirmed:9', '9', 'order_confirmed', 'sent', gen_random_uuid())`)
	_, err = sc.Store.Resend(ctx(t), "order-confirmed:9", "shop.example", "ns")
	require.ErrorIs(t, err, store.ErrWrongState, "a row without content cannot be resent")

	// An earlier resend still in flight blocks the next one.
	key := seedMail(t, sc, "order-confirmed:7", "7", mailtype.StatusFailed)
	first, err := sc.Store.Resend(ctx(t), key, "shop.example", "ns")
	require.NoError(t, err)
	_, err = sc.Store.Resend(ctx(t), key, "shop.example", "ns")
	var se *store.StateError
	require.ErrorAs(t, err, &se)
	require.Equal(t, first, se.DedupeKey)
	require.EqualValues(t, 2, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE order_id = '7'`))
	require.EqualValues(t, 0, sc.QueryInt(t, `SELECT count(*) FROM outbox`))

	// Nor can a resend of another member of the family slip past it: the
	// original sent, :resend:1 finished, :resend:2 pending; resending
	// :resend:1 again would put two sends of the order in flight.
	sc.Exec(t, `UPDATE mail SET status = 'sent' WHERE dedupe_key = $1`, first)
	second, err := sc.Store.Resend(ctx(t), key, "shop.example", "ns")
	require.NoError(t, err)
	_, err = sc.Store.Resend(ctx(t), first, "shop.example", "ns")
	require.ErrorAs(t, err, &se)
	require.Equal(t, second, se.DedupeKey)
	require.EqualValues(t, 3, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE order_id = '7'`))
}

func TestConcurrentResendsNeverShareAKey(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	key := seedMail(t, sc, "order-confirmed:5", "5", mailtype.StatusSent)
	const n = 6
	var wg sync.WaitGroup
	results := make(chan error, n)
	for range n {
		wg.Go(func() {
			_, err := sc.Store.Resend(ctx(t), key, "shop.example", "ns")
			results <- err
		})
	}
	wg.Wait()
	close(results)
	ok := 0
	for err := range results {
		if err == nil {
			ok++
			continue
		}
		require.ErrorIs(t, err, store.ErrWrongState)
	}
	// The first resend is pending, so every later one is refused.
	require.Equal(t, 1, ok)
	require.EqualValues(t, 2, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE order_id = '5'`))
	require.EqualValues(t, 0, sc.QueryInt(t, `SELECT count(*) - count(DISTINCT dedupe_key) FROM mail`))
}

func TestReconcile(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	cases := []struct {
		name            string
		delivered       bool
		cancelRequested bool
		status          mailtype.Status
		feedback        mailtype.EventType
	}{
		{"delivered", true, false, mailtype.StatusSent, mailtype.EmailSent},
		{"not-delivered", false, false, mailtype.StatusPending, ""},
		{"delivered-cancel-requested", true, true, mailtype.StatusSent, mailtype.EmailSent},
		{"not-delivered-cancel-requested", false, true, mailtype.StatusCancelled, mailtype.EmailCancelled},
	}
	// An unknown row whose order was cancelled while it stayed unknown (the
	// consumer recorded the cancel event and reported too late).
	key := seedMail(t, sc, "rec-cancelled-while-unknown", "r", mailtype.StatusUnknown)
	sc.Exec(t, `UPDATE mail SET cancel_event_id = gen_random_uuid() WHERE dedupe_key = $1`, key)
	res, err := sc.Store.Reconcile(ctx(t), key, false)
	require.NoError(t, err)
	require.Equal(t, store.ReconcileResult{Status: mailtype.StatusCancelled, Feedback: mailtype.EmailCancelled}, res)

	for _, c := range cases {
		key := seedMail(t, sc, "rec-"+c.name, "r", mailtype.StatusUnknown)
		sc.Exec(t, `UPDATE mail SET cancel_requested = $2, send_after = now() + interval '1 hour' WHERE dedupe_key = $1`, key, c.cancelRequested)
		res, err := sc.Store.Reconcile(ctx(t), key, c.delivered)
		require.NoError(t, err, c.name)
		require.Equal(t, store.ReconcileResult{Status: c.status, Feedback: c.feedback}, res, c.name)
		m, err := sc.Store.MailByKey(ctx(t), key)
		require.NoError(t, err)
		require.Equal(t, c.status, m.Status, c.name)
		require.Equal(t, 2, m.Attempts, "the fencing token is kept")
		require.Equal(t, c.status == mailtype.StatusSent, m.SentAt != nil, c.name)
		if c.feedback == "" {
			require.Empty(t, m.Feedback, c.name)
			require.WithinDuration(t, time.Now(), m.SendAfter, time.Minute, "due now")
			continue
		}
		require.Len(t, m.Feedback, 1, c.name)
		require.Equal(t, c.feedback, m.Feedback[0].EventType)
		require.Equal(t, c.feedback.RoutingKey(), m.Feedback[0].RoutingKey)
		var env struct {
			DedupeKey string `json:"dedupe_key"`
			Data      struct {
				Status            string `json:"status"`
				ProviderMessageID string `json:"provider_message_id"`
				Attempts          int    `json:"attempts"`
			} `json:"data"`
		}
		require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM outbox WHERE dedupe_key = $1`, key))
		payload := queryText(t, sc, `SELECT payload::text FROM outbox WHERE dedupe_key = $1`, key)
		require.NoError(t, json.Unmarshal([]byte(payload), &env))
		require.Equal(t, key, env.DedupeKey)
		require.Equal(t, string(c.status), env.Data.Status)
		require.Equal(t, "pm-1", env.Data.ProviderMessageID)
		require.Equal(t, 2, env.Data.Attempts)
	}
}

func TestReconcileRefusesAnythingButUnknown(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	for _, st := range []mailtype.Status{mailtype.StatusPending, mailtype.StatusSending, mailtype.StatusSent, mailtype.StatusFailed, mailtype.StatusCancelled} {
		key := seedMail(t, sc, "k-"+string(st), "1", st)
		for _, delivered := range []bool{true, false} {
			_, err := sc.Store.Reconcile(ctx(t), key, delivered)
			var se *store.StateError
			require.ErrorAs(t, err, &se, st)
			require.Equal(t, st, se.Status)
			require.Equal(t, "reconcile", se.Action)
		}
		m, err := sc.Store.MailByKey(ctx(t), key)
		require.NoError(t, err)
		require.Equal(t, st, m.Status)
	}
	_, err := sc.Store.Reconcile(ctx(t), "nope", true)
	require.ErrorIs(t, err, store.ErrNotFound)
	require.EqualValues(t, 0, sc.QueryInt(t, `SELECT count(*) FROM outbox`))

	// A second reconcile of the same mail is refused: one outbox row only.
	key := seedMail(t, sc, "twice", "2", mailtype.StatusUnknown)
	_, err = sc.Store.Reconcile(ctx(t), key, true)
	require.NoError(t, err)
	_, err = sc.Store.Reconcile(ctx(t), key, true)
	require.ErrorIs(t, err, store.ErrWrongState)
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM outbox`))
}

// queryText runs a query returning one text value in the schema.
func queryText(t *testing.T, sc *storetest.Schema, q string, args ...any) string {
	t.Helper()
	conn, err := pgx.Connect(ctx(t), sc.URL)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var out string
	require.NoError(t, conn.QueryRow(ctx(t), q, args...).Scan(&out))
	return out
}

// A resend to a suppressed recipient is refused with the entry's source
// and reason; removed from the list, the same resend goes through.
func TestResendToASuppressedAddressIsRefused(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	key := seedMail(t, sc, "order-confirmed:3", "3", mailtype.StatusFailed)
	to := sc.QueryStrings(t, `SELECT to_email FROM mail WHERE dedupe_key = $1`, key)[0]
	_, _, err := sc.Store.Suppress(ctx(t), to, "permanent bounce General", store.SourceBounce)
	require.NoError(t, err)
	_, err = sc.Store.Resend(ctx(t), key, "shop.example", "ns")
	require.ErrorIs(t, err, store.ErrWrongState)
	require.ErrorContains(t, err, "its recipient is on the suppression list (webhook/bounce: permanent bounce General)")
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE order_id = '3'`))
	_, err = sc.Store.Unsuppress(ctx(t), to)
	require.NoError(t, err)
	_, err = sc.Store.Resend(ctx(t), key, "shop.example", "ns")
	require.NoError(t, err)
	require.EqualValues(t, 2, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE order_id = '3'`))
}
