package store_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// Every statement of the store must work in every pgx query exec mode:
// exec and simple_protocol send no parameter types, so a value's Go type
// decides what PostgreSQL receives (a []byte goes over as bytea, which a
// jsonb column refuses). Each test below runs one part of the write path
// in each mode, on a schema of its own, and checks the rows it wrote.

// modePayload is an event payload with what a simple-protocol literal must
// quote right: non-ASCII text, quotes, a backslash, nesting.
const modePayload = `{"order_id":"%s","customer_name":"Nguyễn Văn B","note":"a \"quoted\" \\ value","items":[{"sku":"A-1","quantity":2}]}`

func modeConfirm(orderID string) store.IngestItem {
	it := confirm(orderID)
	it.Mail.Payload = []byte(fmt.Sprintf(modePayload, orderID))
	return it
}

func outcomesOf(t *testing.T, st *store.Store, items ...store.IngestItem) []mailtype.Disposition {
	t.Helper()
	res, err := st.Ingest(testCtx(t), items)
	require.NoError(t, err)
	out := make([]mailtype.Disposition, len(res))
	for i, r := range res {
		out[i] = r.Disposition
	}
	return out
}

func TestIngestInEveryExecMode(t *testing.T) {
	t.Parallel()
	for _, mode := range storetest.ExecModes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			sc := storetest.New(t)
			st := sc.OpenInMode(t, mode)
			a, b, c := modeConfirm("1"), modeConfirm("2"), modeConfirm("3")
			// Fresh mails only: one multi-row autocommit statement.
			require.Equal(t, []mailtype.Disposition{mailtype.DispositionInserted, mailtype.DispositionInserted, mailtype.DispositionInserted, mailtype.DispositionDuplicate},
				outcomesOf(t, st, a, b, c, a))
			for _, it := range []store.IngestItem{a, b, c} {
				m := it.Mail
				require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE event_id = $1 AND dedupe_key = $2
					AND status = 'pending' AND payload = $3::jsonb AND payload->>'customer_name' = 'Nguyễn Văn B'
					AND subject = 's' AND body_html = '<p>t</p>' AND occurred_at = $4 AND last_error IS NULL`,
					m.EventID, m.DedupeKey, string(m.Payload), m.OccurredAt), "mail of order %s", m.OrderID)
			}
			sc.Exec(t, `UPDATE mail SET status = 'sending', attempts = 1, sends = 1, send_started_at = now(), locked_until = now() + interval '1 minute' WHERE order_id = '2'`)
			sc.Exec(t, `UPDATE mail SET status = 'sent', attempts = 1, sent_at = now() WHERE order_id = '3'`)

			// Stale mails and cancels: one transaction.
			stale := modeConfirm("4")
			stale.Mail.Stale, stale.Mail.MaxAge = true, time.Hour
			cancels := []store.IngestItem{cancelOf("1"), cancelOf("2"), cancelOf("3"), cancelOf("5")}
			items := append([]store.IngestItem{stale}, cancels...)
			// Order 2's send started: its cancel is requested, its outcome reports.
			require.Equal(t, []mailtype.Disposition{mailtype.DispositionStale, mailtype.DispositionCancelled, mailtype.DispositionCancelled,
				mailtype.DispositionTooLate, mailtype.DispositionTombstoned, mailtype.DispositionDuplicate},
				outcomesOf(t, st, append(items, modeConfirm("5"))...))

			require.Equal(t, map[string]string{"1": "cancelled", "2": "sending", "3": "sent", "4": "failed", "5": "cancelled"},
				sc.QueryMap(t, `SELECT order_id, status FROM mail`))
			require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE order_id = '2' AND cancel_requested`))
			require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE order_id = '4' AND last_error LIKE 'stale: %'`))
			require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE order_id = '5' AND event_id IS NULL`))
			for _, it := range cancels {
				require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE order_id = $1 AND cancel_event_id = $2`,
					it.Cancel.OrderID, it.Cancel.EventID))
			}
			requireFeedback(t, sc, map[string]string{
				"1": "EmailCancelled", "3": "EmailCancelTooLate", "4": "EmailFailed", "5": "EmailCancelled",
			})
			require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM outbox WHERE order_id = '4'
				AND payload->'data'->>'error_reason' = 'stale' AND payload->'data'->>'source_event_id' = $1`, stale.Mail.EventID))

			// A redelivered cancel changes nothing.
			require.Equal(t, []mailtype.Disposition{mailtype.DispositionDuplicate, mailtype.DispositionDuplicate}, outcomesOf(t, st, cancels[0], cancels[3]))
			require.EqualValues(t, 4, sc.QueryInt(t, `SELECT count(*) FROM outbox`))
		})
	}
}

// requireFeedback checks that the outbox holds exactly one row per order
// of want, of the given event type, whose JSON payload says the same.
func requireFeedback(t *testing.T, sc *storetest.Schema, want map[string]string) {
	t.Helper()
	require.Equal(t, want, sc.QueryMap(t, `SELECT order_id, event_type FROM outbox`))
	require.EqualValues(t, len(want), sc.QueryInt(t, `SELECT count(*) FROM outbox
		WHERE payload->>'event_type' = event_type AND payload->'data'->>'order_id' = order_id
		AND payload->>'event_id' = event_id::text AND payload->>'dedupe_key' = dedupe_key`))
}

func TestOperatorCommandsInEveryExecMode(t *testing.T) {
	t.Parallel()
	for _, mode := range storetest.ExecModes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			sc := storetest.New(t)
			st := sc.OpenInMode(t, mode)
			ctx := testCtx(t)
			outcomesOf(t, st, modeConfirm("7"), modeConfirm("8"), modeConfirm("9"))
			sc.Exec(t, `UPDATE mail SET status = 'sent', attempts = 1, sent_at = now() WHERE order_id = '7'`)
			sc.Exec(t, `UPDATE mail SET status = 'unknown', attempts = 1, provider = 'smtp', provider_message_id = 'pm-' || order_id
				WHERE order_id IN ('8', '9')`)
			sc.Exec(t, `UPDATE mail SET cancel_event_id = gen_random_uuid() WHERE order_id = '9'`)

			key, err := st.Resend(ctx, "order-confirmed:7", "shop.example", "ns")
			require.NoError(t, err)
			require.Equal(t, "order-confirmed:7:resend:1", key)
			require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM mail n JOIN mail o ON o.dedupe_key = 'order-confirmed:7'
				WHERE n.dedupe_key = $1 AND n.status = 'pending' AND n.payload = o.payload AND n.subject = o.subject
				AND n.body_text = o.body_text AND n.to_email = o.to_email AND n.message_id = $2 AND n.event_id <> o.event_id`,
				key, mailtype.MessageID(key, "shop.example")))

			listed, more, err := st.ListMails(ctx, store.MailFilter{Status: mailtype.StatusUnknown, Template: "order_confirmed", Limit: 1})
			require.NoError(t, err)
			require.True(t, more)
			require.Len(t, listed, 1)
			dry, err := st.ReconcileDryRun(ctx, "order-confirmed:8", true)
			require.NoError(t, err)
			res, err := st.Reconcile(ctx, "order-confirmed:8", true)
			require.NoError(t, err)
			require.Equal(t, store.ReconcileResult{Status: mailtype.StatusSent, Feedback: mailtype.EmailSent}, res)
			require.Equal(t, dry, res)
			res, err = st.Reconcile(ctx, "order-confirmed:9", false)
			require.NoError(t, err)
			require.Equal(t, store.ReconcileResult{Status: mailtype.StatusCancelled, Feedback: mailtype.EmailCancelled}, res)
			_, err = st.Reconcile(ctx, "order-confirmed:7", true)
			var se *store.StateError
			require.ErrorAs(t, err, &se)
			require.Equal(t, mailtype.StatusSent, se.Status)
			requireFeedback(t, sc, map[string]string{"8": "EmailSent", "9": "EmailCancelled"})
			require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM outbox WHERE order_id = '8'
				AND payload->'data'->>'provider_message_id' = 'pm-8' AND payload->'data'->>'status' = 'sent'`))

			m, err := st.MailByKey(ctx, "order-confirmed:8")
			require.NoError(t, err)
			require.Equal(t, mailtype.StatusSent, m.Status)
			require.NotNil(t, m.SentAt)
			require.Len(t, m.Feedback, 1)
			require.Equal(t, mailtype.EmailSent, m.Feedback[0].EventType)
			mails, err := st.MailsByOrder(ctx, "7")
			require.NoError(t, err)
			require.Len(t, mails, 2)
			require.Equal(t, []string{"order-confirmed:7", key}, []string{mails[0].DedupeKey, mails[1].DedupeKey})

			folded, err := st.CompactStatusCounts(ctx)
			require.NoError(t, err)
			require.Positive(t, folded)
			stats, err := st.Stats(ctx)
			require.NoError(t, err)
			require.Equal(t, map[mailtype.Status]int64{
				mailtype.StatusPending: 1, mailtype.StatusSending: 0, mailtype.StatusSent: 2,
				mailtype.StatusFailed: 0, mailtype.StatusCancelled: 1, mailtype.StatusUnknown: 0, mailtype.StatusHeld: 0,
			}, stats.Mails)
			require.EqualValues(t, 2, stats.OutboxPending)
		})
	}
}

func TestRelayStatementsInEveryExecMode(t *testing.T) {
	t.Parallel()
	for _, mode := range storetest.ExecModes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			sc := storetest.New(t)
			st := sc.OpenInMode(t, mode)
			ctx := testCtx(t)
			l, err := st.ListenOutbox(ctx, "listen-"+mode)
			require.NoError(t, err)
			defer l.Close()
			require.NoError(t, storetest.InsertOutbox(ctx, st, feedback("1"), feedback("2"), feedback("3")))
			require.NoError(t, l.Wait(ctx), "the insert notified the listener")

			sess, err := st.OpenRelay("relay-"+mode, 5*time.Second)
			require.NoError(t, err)
			defer sess.Close()
			epoch, held, err := sess.AcquireLease(ctx, "relay-"+mode, time.Minute)
			require.NoError(t, err)
			require.True(t, held)
			require.NoError(t, sess.RenewLease(ctx, epoch, time.Minute))

			rows, err := sess.FetchOutbox(ctx, epoch, 10, nil)
			require.NoError(t, err)
			require.Len(t, rows, 3)
			for i, r := range rows {
				var env struct {
					EventID   string `json:"event_id"`
					EventType string `json:"event_type"`
					Data      struct {
						OrderID string `json:"order_id"`
					} `json:"data"`
				}
				require.NoError(t, json.Unmarshal(r.Payload, &env))
				require.Equal(t, r.EventID, env.EventID)
				require.NoError(t, uuid.Validate(r.EventID))
				require.Equal(t, "EmailSent", env.EventType)
				require.Equal(t, []string{string(rune('1' + i)), "mail.events", "email.sent"}, []string{env.Data.OrderID, r.Exchange, r.RoutingKey})
				require.WithinDuration(t, time.Now(), r.CreatedAt, time.Minute)
			}

			got, err := sess.RecordOutboxResults(ctx, epoch, []int64{rows[0].ID}, nil, 3)
			require.NoError(t, err)
			require.Empty(t, got)
			got, err = sess.RecordOutboxResults(ctx, epoch, []int64{rows[1].ID},
				[]store.OutboxFailure{{ID: rows[2].ID, Error: "nack", RetryIn: time.Hour, MayDie: true}}, 1)
			require.NoError(t, err)
			require.Equal(t, []store.OutboxAttempt{{ID: rows[2].ID, EventID: rows[2].EventID, EventType: "EmailSent",
				DedupeKey: "order-confirmed:3", Attempts: 1, Dead: true}}, got)
			n, err := sess.DeletePublishedOutbox(ctx, time.Now().Add(time.Hour), 10)
			require.NoError(t, err)
			require.EqualValues(t, 2, n)

			left, err := storetest.Outbox(ctx, st)
			require.NoError(t, err)
			require.Len(t, left, 1)
			require.Equal(t, rows[2].ID, left[0].ID)
			require.NotNil(t, left[0].DeadAt)
			require.Equal(t, "nack", left[0].LastError)
		})
	}
}

func TestMigrationsInEveryExecMode(t *testing.T) {
	t.Parallel()
	for _, mode := range storetest.ExecModes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			sc := storetest.NewEmpty(t)
			st := sc.OpenInMode(t, mode)
			ctx := testCtx(t)
			require.ErrorIs(t, st.CheckSchema(ctx), store.ErrSchemaBehind)
			applied, err := st.MigrateUp(ctx)
			require.NoError(t, err)
			require.NotEmpty(t, applied)
			require.NoError(t, st.CheckSchema(ctx))
			v, err := st.MigrateDown(ctx)
			require.NoError(t, err)
			require.Equal(t, applied[len(applied)-1], v)
			again, err := st.MigrateUp(ctx)
			require.NoError(t, err)
			require.Equal(t, []int64{v}, again)
			status, err := st.MigrateStatus(ctx)
			require.NoError(t, err)
			require.Len(t, status, len(applied))
			for _, m := range status {
				require.True(t, m.Applied, "migration %d", m.Version)
			}
		})
	}
}
