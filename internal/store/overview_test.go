package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

func TestOverview(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	ctx := testCtx(t)
	// Sent in the last hour with lags of 10, 20, 30 and 40 s; sent two
	// hours ago; failed now and failed two hours ago; pending (the oldest
	// received 3 hours ago, a cancel requested on an older one); held;
	// cancelled.
	for i, m := range []struct {
		status  string
		created string // how long ago it was received
		sentAgo string // how long ago it was sent (and changed last)
	}{
		{"sent", "1 minute", "0 minutes"}, {"sent", "2 minutes", "0 minutes"}, {"sent", "3 minutes", "0 minutes"},
		{"sent", "4 minutes", "0 minutes"}, {"sent", "3 hours", "2 hours"},
		{"failed", "1 minute", ""}, {"failed", "3 hours", "2 hours"},
		{"pending", "3 hours", ""}, {"pending", "4 hours", ""}, {"pending", "1 minute", ""}, {"held", "5 hours", ""}, {"cancelled", "1 minute", ""},
	} {
		sc.Exec(t, `INSERT INTO mail (dedupe_key, order_id, template, to_email, status, occurred_at, created_at, sent_at, updated_at)
			SELECT 'k' || $1::int, $1::text, 'order_confirmed', 'a@example.com', $2,
				c - interval '10 seconds' * $1::int, c, s, COALESCE(s, now())
			FROM (SELECT now() - $3::interval AS c, now() - NULLIF($4, '')::interval AS s) t`, i, m.status, m.created, m.sentAgo)
	}
	for key, lag := range map[string]string{"k1": "20 seconds", "k2": "30 seconds", "k3": "10 seconds"} {
		sc.Exec(t, `UPDATE mail SET occurred_at = sent_at - $2::interval, created_at = sent_at - interval '1 second' WHERE dedupe_key = $1`, key, lag)
	}
	sc.Exec(t, `UPDATE mail SET occurred_at = NULL, created_at = sent_at - interval '40 seconds' WHERE dedupe_key = 'k0'`)
	sc.Exec(t, `UPDATE mail SET cancel_requested = true WHERE dedupe_key = 'k8'`)
	sc.Exec(t, `INSERT INTO outbox (event_id, exchange, routing_key, event_type, payload, created_at, published_at, dead_at)
		VALUES (gen_random_uuid(), 'mail.events', 'email.sent', 'EmailSent', '{}', now() - interval '1 hour', now(), NULL),
		       (gen_random_uuid(), 'mail.events', 'email.sent', 'EmailSent', '{}', now() - interval '5 minutes', NULL, NULL),
		       (gen_random_uuid(), 'mail.events', 'email.sent', 'EmailSent', '{}', now() - interval '1 minute', NULL, NULL),
		       (gen_random_uuid(), 'mail.events', 'email.sent', 'EmailSent', '{}', now() - interval '1 day', NULL, now())`)
	sc.Exec(t, `INSERT INTO suppression (address, reason, source, expires_at) VALUES
		('a@example.com', 'bounce', 'webhook/bounce', NULL), ('b@example.com', 'transient', 'webhook/transient', now() + interval '1 day'),
		('c@example.com', 'transient', 'webhook/transient', now() - interval '1 second')`)
	_, err := sc.Store.PauseProvider(ctx, "resend", mailtype.PauseQuota, time.Hour, "daily quota reached")
	require.NoError(t, err)

	o, err := sc.Store.Overview(ctx)
	require.NoError(t, err)
	require.Equal(t, map[mailtype.Status]int64{mailtype.StatusPending: 3, mailtype.StatusSending: 0, mailtype.StatusSent: 5,
		mailtype.StatusFailed: 2, mailtype.StatusCancelled: 1, mailtype.StatusUnknown: 0, mailtype.StatusHeld: 1}, o.Counts)
	require.NotNil(t, o.OldestPending)
	// k7, pending for 3 hours; k8, 4 hours, has its cancel requested. Read
	// from the row, not from the clock: a busy machine may take seconds
	// between the inserts and the read.
	oldest := sc.QueryInt(t, `SELECT (extract(epoch FROM created_at) * 1000000)::bigint FROM mail WHERE dedupe_key = 'k7'`)
	require.Equal(t, time.UnixMicro(oldest).UTC(), o.OldestPending.UTC(), "the cancelled one is not waiting")
	require.Equal(t, int64(4), o.SentLastHour)
	require.Equal(t, int64(1), o.FailedLastHour)
	// Lags 40, 20, 30 and 10 s (k0 without occurred_at counts from its receipt).
	require.Equal(t, 25*time.Second, o.LagP50.Round(time.Millisecond))
	require.Equal(t, 38500*time.Millisecond, o.LagP95.Round(time.Millisecond))
	require.Equal(t, int64(2), o.OutboxUnpublished)
	require.WithinDuration(t, o.Now.Add(-5*time.Minute), *o.OutboxOldest, time.Second)
	require.Equal(t, int64(1), o.OutboxDead)
	require.Equal(t, int64(2), o.Suppressions, "the expired entry is not in force")
	require.Len(t, o.Providers, 2)
	require.Equal(t, []string{"resend", "smtp"}, []string{o.Providers[0].Provider, o.Providers[1].Provider})
	require.Equal(t, mailtype.PauseQuota, o.Providers[0].Reason)
	require.Equal(t, "daily quota reached", o.Providers[0].Error)
	require.False(t, o.Providers[1].Paused())

	empty := storetest.New(t)
	o, err = empty.Store.Overview(ctx)
	require.NoError(t, err)
	require.Equal(t, store.Overview{Now: o.Now, Counts: map[mailtype.Status]int64{mailtype.StatusPending: 0, mailtype.StatusSending: 0,
		mailtype.StatusSent: 0, mailtype.StatusFailed: 0, mailtype.StatusCancelled: 0, mailtype.StatusUnknown: 0, mailtype.StatusHeld: 0},
		Providers: o.Providers}, o)
}
