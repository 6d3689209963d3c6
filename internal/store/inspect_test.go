package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

func TestMailByKeyAndByOrder(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	key := seedMail(t, sc, "order-confirmed:42", "42", mailtype.StatusUnknown)
	_, err := sc.Store.Reconcile(ctx(t), key, true)
	require.NoError(t, err)
	resend, err := sc.Store.Resend(ctx(t), key, "shop.example", "ns")
	require.NoError(t, err)
	seedMail(t, sc, "order-confirmed:43", "43", mailtype.StatusPending)

	m, err := sc.Store.MailByKey(ctx(t), key)
	require.NoError(t, err)
	require.Equal(t, key, m.DedupeKey)
	require.Equal(t, "42", m.OrderID)
	require.Equal(t, mailtype.StatusSent, m.Status)
	require.Equal(t, "smtp", m.Provider)
	require.Equal(t, "pm-1", m.ProviderMessageID)
	require.Equal(t, "timeout (ambiguous): reset", m.LastError)
	require.NotNil(t, m.SentAt)
	require.Len(t, m.Feedback, 1)
	require.Equal(t, mailtype.EmailSent, m.Feedback[0].EventType)
	require.Nil(t, m.Feedback[0].PublishedAt)

	all, err := sc.Store.MailsByOrder(ctx(t), "42")
	require.NoError(t, err)
	require.Len(t, all, 2)
	require.Equal(t, key, all[0].DedupeKey)
	require.Equal(t, resend, all[1].DedupeKey)
	require.Len(t, all[0].Feedback, 1)
	require.Empty(t, all[1].Feedback)

	none, err := sc.Store.MailsByOrder(ctx(t), "404")
	require.NoError(t, err)
	require.Empty(t, none)
	_, err = sc.Store.MailByKey(ctx(t), "order-confirmed:404")
	require.ErrorIs(t, err, store.ErrNotFound)
}

func TestTombstoneShowsWithoutContent(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	sc.Exec(t, `INSERT INTO mail (dedupe_key, order_id, template, status, cancel_event_id) VALUES ('order-confirmed:8', '8', 'order_confirmed', 'cancelled', gen_random_uuid())`)
	m, err := sc.Store.MailByKey(ctx(t), "order-confirmed:8")
	require.NoError(t, err)
	require.Equal(t, "", m.EventID)
	require.NotEmpty(t, m.CancelEventID)
	require.Equal(t, mailtype.StatusCancelled, m.Status)
	require.Nil(t, m.SentAt)
	require.Nil(t, m.LockedUntil)
}

func TestStatsCountsEveryStatusAndBacklog(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	st, err := sc.Store.Stats(ctx(t))
	require.NoError(t, err)
	require.Len(t, st.Mails, len(mailtype.Statuses))
	for _, s := range mailtype.Statuses {
		require.Zero(t, st.Mails[s], s)
	}
	require.Equal(t, store.Stats{Mails: st.Mails, Unconfirmed: map[string]int64{}, UnconfirmedRecent: map[string]int64{}}, st)

	for i, s := range []mailtype.Status{"pending", "pending", "sending", "sent", "sent", "sent", "unknown"} {
		seedMail(t, sc, "k"+string(rune('a'+i)), "1", s)
	}
	sc.Exec(t, `UPDATE mail SET created_at = now() - interval '90 seconds' WHERE dedupe_key = 'ka'`)
	sc.Exec(t, `INSERT INTO outbox (event_id, exchange, routing_key, event_type, payload, created_at, published_at, dead_at)
		VALUES (gen_random_uuid(), 'x', 'email.sent', 'EmailSent', '{}', now() - interval '30 seconds', NULL, NULL),
		       (gen_random_uuid(), 'x', 'email.sent', 'EmailSent', '{}', now() - interval '5 seconds', NULL, NULL),
		       (gen_random_uuid(), 'x', 'email.sent', 'EmailSent', '{}', now() - interval '1 hour', now(), NULL),
		       (gen_random_uuid(), 'x', 'email.sent', 'EmailSent', '{}', now() - interval '2 hours', NULL, now())`)

	st, err = sc.Store.Stats(ctx(t))
	require.NoError(t, err)
	require.Equal(t, map[mailtype.Status]int64{"pending": 2, "sending": 1, "sent": 3, "failed": 0, "cancelled": 0, "unknown": 1, "held": 0}, st.Mails)
	require.InDelta(t, 90, st.OldestPendingAge.Seconds(), 10)
	require.EqualValues(t, 2, st.OutboxPending)
	require.InDelta(t, 30, st.OutboxOldestAge.Seconds(), 10)
	require.EqualValues(t, 1, st.OutboxDead)
	require.Less(t, st.OutboxOldestAge, time.Minute)
}
