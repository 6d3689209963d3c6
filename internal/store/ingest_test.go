package store_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

type ingestBundle struct {
	sc  *storetest.Schema
	ctx context.Context
}

func setupIngest(t *testing.T) *ingestBundle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return &ingestBundle{sc: storetest.New(t), ctx: ctx}
}

func (b *ingestBundle) ingest(t *testing.T, items ...store.IngestItem) []mailtype.Disposition {
	t.Helper()
	res, err := b.sc.Store.Ingest(b.ctx, items)
	require.NoError(t, err)
	out := make([]mailtype.Disposition, len(res))
	for i, r := range res {
		out[i] = r.Disposition
	}
	return out
}

func (b *ingestBundle) count(t *testing.T, sql string, args ...any) int64 {
	t.Helper()
	return b.sc.QueryInt(t, sql, args...)
}

func (b *ingestBundle) feedback(t *testing.T, eventType mailtype.EventType, key string) int64 {
	t.Helper()
	return b.count(t, `SELECT count(*) FROM outbox WHERE event_type = $1 AND dedupe_key = $2`, string(eventType), key)
}

func confirm(orderID string) store.IngestItem {
	return confirmKey(uuid.NewString(), mailtype.ConfirmationKey(orderID), orderID)
}

func confirmKey(eventID, key, orderID string) store.IngestItem {
	return store.IngestItem{Mail: &store.NewMail{
		EventID: eventID, DedupeKey: key, OrderID: orderID, Template: "order_confirmed", Locale: "vi",
		ToEmail: "b@example.com", Payload: []byte(`{"order_id":"` + orderID + `"}`),
		Subject: "s", BodyText: "t", BodyHTML: "<p>t</p>", MessageID: "<x@example.com>",
		OccurredAt: time.Now().UTC().Truncate(time.Microsecond),
	}}
}

func cancelOf(orderID string) store.IngestItem {
	return store.IngestItem{Cancel: &store.Cancel{EventID: uuid.NewString(), OrderID: orderID, Template: "order_confirmed"}}
}

func TestIngestDedupesByEventIDAndDedupeKey(t *testing.T) {
	t.Parallel()
	b := setupIngest(t)
	ev := confirm("1")
	require.Equal(t, []mailtype.Disposition{mailtype.DispositionInserted, mailtype.DispositionDuplicate}, b.ingest(t, ev, ev))
	require.Equal(t, []mailtype.Disposition{mailtype.DispositionDuplicate}, b.ingest(t, ev))
	other := confirmKey(uuid.NewString(), mailtype.ConfirmationKey("1"), "1")
	require.Equal(t, []mailtype.Disposition{mailtype.DispositionDuplicate}, b.ingest(t, other))
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM mail`))
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM mail WHERE event_id = $1 AND status = 'pending'`, ev.Mail.EventID))
	require.Equal(t, int64(0), b.count(t, `SELECT count(*) FROM outbox`))
}

func TestIngestStoresRenderedContent(t *testing.T) {
	t.Parallel()
	b := setupIngest(t)
	ev := confirm("2")
	b.ingest(t, ev)
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM mail WHERE subject = 's' AND body_text = 't'
		AND body_html = '<p>t</p>' AND message_id = '<x@example.com>' AND to_email = 'b@example.com'
		AND locale = 'vi' AND payload->>'order_id' = '2' AND occurred_at = $1 AND attempts = 0`, ev.Mail.OccurredAt))
}

func TestIngestCancelBeforeConfirmWritesTombstone(t *testing.T) {
	t.Parallel()
	b := setupIngest(t)
	c := cancelOf("3")
	require.Equal(t, []mailtype.Disposition{mailtype.DispositionTombstoned}, b.ingest(t, c))
	require.Equal(t, []mailtype.Disposition{mailtype.DispositionDuplicate}, b.ingest(t, confirm("3")))
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM mail`))
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM mail WHERE event_id IS NULL AND status = 'cancelled'
		AND dedupe_key = 'order-confirmed:3' AND cancel_event_id = $1`, c.Cancel.EventID))
	require.Equal(t, int64(1), b.feedback(t, mailtype.EmailCancelled, "order-confirmed:3"))
	require.Equal(t, []mailtype.Disposition{mailtype.DispositionDuplicate}, b.ingest(t, c), "redelivered cancel")
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM outbox`))
}

func TestIngestCancelInOneBatchFollowsArrivalOrder(t *testing.T) {
	t.Parallel()
	b := setupIngest(t)
	got := b.ingest(t, confirm("4"), cancelOf("4"), cancelOf("5"), confirm("5"))
	require.Equal(t, []mailtype.Disposition{mailtype.DispositionInserted, mailtype.DispositionCancelled, mailtype.DispositionTombstoned, mailtype.DispositionDuplicate}, got)
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM mail WHERE order_id = '4' AND status = 'cancelled' AND event_id IS NOT NULL`))
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM mail WHERE order_id = '5' AND status = 'cancelled' AND event_id IS NULL`))
	require.Equal(t, int64(2), b.count(t, `SELECT count(*) FROM outbox WHERE event_type = 'EmailCancelled'`))
}

func TestIngestCancelEveryPendingMailOfTheOrder(t *testing.T) {
	t.Parallel()
	b := setupIngest(t)
	b.ingest(t, confirm("6"), confirmKey(uuid.NewString(), "order-confirmed:6:resend:1", "6"), confirm("7"))
	require.Equal(t, []mailtype.Disposition{mailtype.DispositionCancelled}, b.ingest(t, cancelOf("6")))
	require.Equal(t, int64(2), b.count(t, `SELECT count(*) FROM mail WHERE order_id = '6' AND status = 'cancelled'`))
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM mail WHERE order_id = '7' AND status = 'pending'`))
	require.Equal(t, int64(1), b.feedback(t, mailtype.EmailCancelled, "order-confirmed:6"))
	require.Equal(t, int64(1), b.feedback(t, mailtype.EmailCancelled, "order-confirmed:6:resend:1"))
}

func TestIngestCancelWhileSendingRequestsCancel(t *testing.T) {
	t.Parallel()
	b := setupIngest(t)
	b.ingest(t, confirm("8"))
	b.sc.Exec(t, `UPDATE mail SET status = 'sending', attempts = 1, sends = 1, send_started_at = now(),
		locked_until = now() + interval '1 minute' WHERE order_id = '8'`)
	require.Equal(t, []mailtype.Disposition{mailtype.DispositionCancelled}, b.ingest(t, cancelOf("8")))
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM mail WHERE order_id = '8' AND status = 'sending' AND cancel_requested AND attempts = 1`))
	require.Equal(t, int64(0), b.count(t, `SELECT count(*) FROM outbox`), "the send's outcome reports, not the cancel")
	require.Equal(t, []mailtype.Disposition{mailtype.DispositionDuplicate}, b.ingest(t, cancelOf("8")), "second cancel")
	require.Equal(t, int64(0), b.count(t, `SELECT count(*) FROM outbox`))
}

// A pending mail waiting to retry an ambiguous send may have been
// delivered: the cancel stops the retry and the mail ends unknown, with
// EmailUnknown then EmailCancelTooLate, never EmailCancelled.
func TestIngestCancelOfARetryAfterAnAmbiguousSendIsUnknown(t *testing.T) {
	t.Parallel()
	b := setupIngest(t)
	b.ingest(t, confirm("10"))
	b.sc.Exec(t, `UPDATE mail SET attempts = 1, sends = 1, ambiguous = 1, send_after = now() + interval '1 hour' WHERE order_id = '10'`)
	c := cancelOf("10")
	require.Equal(t, []mailtype.Disposition{mailtype.DispositionTooLate}, b.ingest(t, c))
	require.Equal(t, []mailtype.Disposition{mailtype.DispositionDuplicate}, b.ingest(t, c), "redelivered cancel")
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM mail WHERE order_id = '10' AND status = 'unknown' AND cancel_requested
		AND cancel_event_id = $1`, c.Cancel.EventID))
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM outbox WHERE event_type = 'EmailUnknown'
		AND payload->'data'->>'error_reason' = 'cancelled_after_ambiguous' AND payload->'data'->>'attempts' = '1'`))
	require.Equal(t, int64(1), b.feedback(t, mailtype.EmailCancelTooLate, "order-confirmed:10"))
	require.Equal(t, int64(0), b.feedback(t, mailtype.EmailCancelled, "order-confirmed:10"))
	require.Equal(t, map[string]string{"1": "EmailUnknown", "2": "EmailCancelTooLate"},
		b.sc.QueryMap(t, `SELECT (row_number() OVER (ORDER BY id))::text, event_type FROM outbox`), "in this order")
}

// A claimed mail whose send has not started is not too late: the cancel
// writes nothing yet, and the sender's release reports EmailCancelled.
func TestIngestCancelOfAQueuedClaimReportsNothingYet(t *testing.T) {
	t.Parallel()
	b := setupIngest(t)
	b.ingest(t, confirm("11"))
	b.sc.Exec(t, `UPDATE mail SET status = 'sending', attempts = 1, locked_until = now() + interval '1 minute' WHERE order_id = '11'`)
	require.Equal(t, []mailtype.Disposition{mailtype.DispositionCancelled}, b.ingest(t, cancelOf("11")))
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM mail WHERE order_id = '11' AND status = 'sending' AND cancel_requested`))
	require.Equal(t, int64(0), b.count(t, `SELECT count(*) FROM outbox`))
	require.Equal(t, []mailtype.Disposition{mailtype.DispositionDuplicate}, b.ingest(t, cancelOf("11")), "second cancel")
}

func TestIngestCancelAfterSentIsTooLateOnce(t *testing.T) {
	t.Parallel()
	b := setupIngest(t)
	b.ingest(t, confirm("9"))
	b.sc.Exec(t, `UPDATE mail SET status = 'sent', attempts = 1, provider = 'smtp', provider_message_id = 'pm-1', sent_at = now() WHERE order_id = '9'`)
	c := cancelOf("9")
	require.Equal(t, []mailtype.Disposition{mailtype.DispositionTooLate}, b.ingest(t, c))
	require.Equal(t, []mailtype.Disposition{mailtype.DispositionDuplicate}, b.ingest(t, c), "redelivered cancel")
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM mail WHERE order_id = '9' AND status = 'sent' AND cancel_event_id = $1`, c.Cancel.EventID))
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM outbox`))
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM outbox WHERE event_type = 'EmailCancelTooLate'
		AND payload->'data'->>'provider_message_id' = 'pm-1' AND payload->'data'->>'status' = 'sent'
		AND payload->'data'->>'source_event_id' = $1`, c.Cancel.EventID))
}

func TestIngestCancelLeavesFailedAndCancelledAlone(t *testing.T) {
	t.Parallel()
	b := setupIngest(t)
	b.ingest(t, confirm("10"), confirm("11"))
	b.sc.Exec(t, `UPDATE mail SET status = 'failed' WHERE order_id = '10'`)
	c10 := cancelOf("10")
	require.Equal(t, []mailtype.Disposition{mailtype.DispositionDuplicate, mailtype.DispositionDuplicate}, b.ingest(t, c10, cancelOf("10")))
	require.Equal(t, []mailtype.Disposition{mailtype.DispositionCancelled, mailtype.DispositionDuplicate}, b.ingest(t, cancelOf("11"), cancelOf("11")))
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM mail WHERE order_id = '10' AND status = 'failed' AND cancel_event_id = $1`, c10.Cancel.EventID),
		"the first cancel is recorded on the failed mail (mail resend refuses it), with no event")
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM outbox`))
}

func TestIngestStaleIsRecordedAsFailedOnce(t *testing.T) {
	t.Parallel()
	b := setupIngest(t)
	ev := confirm("12")
	ev.Mail.Stale, ev.Mail.MaxAge = true, 24*time.Hour
	require.Equal(t, []mailtype.Disposition{mailtype.DispositionStale, mailtype.DispositionDuplicate}, b.ingest(t, ev, ev))
	require.Equal(t, []mailtype.Disposition{mailtype.DispositionDuplicate}, b.ingest(t, ev))
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM mail WHERE status = 'failed' AND last_error LIKE 'stale:%' AND last_error_class = 'permanent'`))
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM outbox WHERE event_type = 'EmailFailed'
		AND payload->'data'->>'error_reason' = 'stale' AND payload->'data'->>'error_class' = 'permanent'`))
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM outbox`))
}

// Whatever PostgreSQL refuses of a batch is the statement's fault or the
// database's, never an event's (events are checked before they reach
// SQL): the refusal is transient, carries its SQLSTATE, and writes nothing.
func TestIngestRefusalIsTransientWithItsSQLState(t *testing.T) {
	t.Parallel()
	b := setupIngest(t)
	huge := make([]byte, 4000)
	_, _ = rand.Read(huge)
	unchecked := confirmKey(uuid.NewString(), hex.EncodeToString(huge), "13") // too large for the unique index
	require.Error(t, unchecked.Check(), "Check refuses it")
	_, err := b.sc.Store.Ingest(b.ctx, []store.IngestItem{confirm("14"), unchecked})
	require.Error(t, err)
	require.Equal(t, mailtype.Transient, mailtype.ClassOf(err))
	require.Equal(t, mailtype.ReasonDatabase, mailtype.ReasonOf(err))
	var re *store.RefusedError
	require.ErrorAs(t, err, &re)
	require.Equal(t, "54000", re.SQLState, "program limit exceeded: index row size")
	require.Equal(t, int64(0), b.count(t, `SELECT count(*) FROM mail`), "the batch is atomic")

	b.sc.Exec(t, `ALTER TABLE mail ADD CONSTRAINT test_refuse CHECK (order_id <> '15')`)
	_, err = b.sc.Store.Ingest(b.ctx, []store.IngestItem{cancelOf("15")})
	require.ErrorAs(t, err, &re)
	require.Equal(t, "23514", re.SQLState)
	require.Equal(t, mailtype.Transient, mailtype.ClassOf(err))
	require.Equal(t, int64(0), b.count(t, `SELECT count(*) FROM outbox`))
}

func TestIngestUnreachableDatabaseIsTransient(t *testing.T) {
	t.Parallel()
	b := setupIngest(t)
	st, err := store.Open(b.ctx, store.Options{URL: storetest.WithSearchPath(storetest.URL(), b.sc.Name)})
	require.NoError(t, err)
	st.Close()
	_, err = st.Ingest(b.ctx, []store.IngestItem{confirm("15")})
	require.Error(t, err)
	require.Equal(t, mailtype.Transient, mailtype.ClassOf(err))
	require.Equal(t, mailtype.ReasonDatabase, mailtype.ReasonOf(err))
}

// A cancel whose tombstone insert waits on a confirmation that another
// transaction is inserting must still cancel that confirmation once it
// commits, although the cancel statement's snapshot cannot see it.
func TestIngestCancelRacingAConfirmStillCancelsIt(t *testing.T) {
	t.Parallel()
	b := setupIngest(t)
	conn, err := pgx.Connect(b.ctx, b.sc.URL)
	require.NoError(t, err)
	defer conn.Close(b.ctx)
	tx, err := conn.Begin(b.ctx)
	require.NoError(t, err)
	_, err = tx.Exec(b.ctx, `INSERT INTO mail (event_id, dedupe_key, order_id, template, status)
		VALUES (gen_random_uuid(), 'order-confirmed:16', '16', 'order_confirmed', 'pending')`)
	require.NoError(t, err)

	type result struct {
		out []store.IngestResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := b.sc.Store.Ingest(b.ctx, []store.IngestItem{cancelOf("16")})
		done <- result{out, err}
	}()
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%WITH tomb AS%'`) == 1
	}, 10*time.Second, 10*time.Millisecond, "the cancel waits on the uncommitted confirmation")
	require.NoError(t, tx.Commit(b.ctx))

	r := <-done
	require.NoError(t, r.err)
	require.Equal(t, mailtype.DispositionCancelled, r.out[0].Disposition)
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM mail WHERE order_id = '16' AND status = 'cancelled' AND event_id IS NOT NULL`))
	require.Equal(t, int64(1), b.feedback(t, mailtype.EmailCancelled, "order-confirmed:16"))
}

func TestIngestBatchOfManyMails(t *testing.T) {
	t.Parallel()
	b := setupIngest(t)
	items := make([]store.IngestItem, 0, 300)
	for i := range 300 {
		items = append(items, confirm(fmt.Sprint(1000+i%250))) // 50 same-intent duplicates
	}
	out := b.ingest(t, items...)
	n := map[mailtype.Disposition]int{}
	for _, o := range out {
		n[o]++
	}
	require.Equal(t, map[mailtype.Disposition]int{mailtype.DispositionInserted: 250, mailtype.DispositionDuplicate: 50}, n)
	require.Equal(t, int64(250), b.count(t, `SELECT count(*) FROM mail`))
}
