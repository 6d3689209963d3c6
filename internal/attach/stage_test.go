package attach_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/attach"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

type file struct {
	FileName    string `json:"file_name"`
	ContentType string `json:"content_type"`
	URL         string `json:"url"`
	SHA256      string `json:"sha256"`
	Size        int    `json:"size"`
	Optional    bool   `json:"optional"`
}

func pdfAt(u string, optional bool) file {
	return file{FileName: "Hóa đơn.pdf", ContentType: "application/pdf", URL: u, SHA256: sum(invoice), Size: len(invoice), Optional: optional}
}

func mailWith(t *testing.T, orderID string, occurred time.Time, files ...file) store.IngestItem {
	t.Helper()
	payload, err := json.Marshal(map[string]any{"order_id": orderID, "attachments": files})
	require.NoError(t, err)
	return store.IngestItem{Mail: &store.NewMail{
		EventID: uuid.NewString(), DedupeKey: mailtype.ConfirmationKey(orderID), OrderID: orderID,
		Template: "order_confirmed", Locale: "vi", ToEmail: "b@example.com", Payload: payload,
		Subject: "s", BodyText: "t", BodyHTML: "<p>t</p>", MessageID: "<" + orderID + "@example.com>",
		OccurredAt: occurred, MaxAge: 24 * time.Hour, HasAttachments: len(files) > 0,
	}}
}

// One pass of the stage over mails of every kind: each ends as the
// design says, and only the ready ones become claimable.
func TestStageOutcomes(t *testing.T) {
	t.Parallel()
	fs := newFileServer(t, routes())
	sc := storetest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	now := time.Now().UTC().Truncate(time.Microsecond)
	wrong := pdfAt(fs.url("/invoice.pdf"), false)
	wrong.SHA256 = sum([]byte("other"))
	_, err := sc.Store.Ingest(ctx, []store.IngestItem{
		mailWith(t, "good", now, pdfAt(fs.url("/invoice.pdf"), false)),
		mailWith(t, "bad-sum", now, wrong),
		mailWith(t, "optional-gone", now, pdfAt(fs.url("/invoice.pdf"), false), pdfAt(fs.url("/gone"), true)),
		mailWith(t, "busy", now, pdfAt(fs.url("/busy"), false)),
		mailWith(t, "busy-too-long", now.Add(-2*time.Hour), pdfAt(fs.url("/busy"), false)),
	})
	require.NoError(t, err)

	reg := prometheus.NewRegistry()
	m := attach.NewMetrics(reg)
	st := attach.NewStage(attach.Config{
		Fetch: fs.config(), Concurrency: 8, RetryBackoff: time.Minute, RetryBackoffMax: time.Hour,
		PollInterval: time.Second, MaxEventAge: time.Hour,
	}, sc.Store, m, slog.New(slog.DiscardHandler))
	n, err := st.Once(ctx)
	require.NoError(t, err)
	require.Equal(t, 5, n)

	state := sc.QueryMap(t, `SELECT order_id, status || '/' || attach_state FROM mail`)
	require.Equal(t, map[string]string{
		"good": "pending/ready", "bad-sum": "failed/failed", "optional-gone": "pending/ready",
		"busy": "pending/pending", "busy-too-long": "failed/failed",
	}, state)
	require.Equal(t, int64(2), sc.QueryInt(t, `SELECT count(*) FROM mail_attachment WHERE status = 'fetched' AND content = $1`, invoice))
	require.Equal(t, int64(1), sc.QueryInt(t, `SELECT count(*) FROM mail_attachment WHERE status = 'omitted' AND reason = 'status' AND detail = 'HTTP 404'`))
	require.Equal(t, int64(1), sc.QueryInt(t, `SELECT count(*) FROM mail m JOIN mail_attachment a ON a.mail_id = m.id
		WHERE m.order_id = 'busy' AND a.status = 'pending' AND a.reason = 'status' AND a.attempts = 1
		  AND m.attach_next_at > now() + interval '20 seconds'`), "a transient failure waits its backoff")
	require.Equal(t, int64(1), sc.QueryInt(t, `SELECT count(*) FROM mail WHERE order_id = 'bad-sum'
		AND last_error LIKE 'attachment: Hóa đơn.pdf: checksum: SHA-256 %'`))
	require.Equal(t, int64(1), sc.QueryInt(t, `SELECT count(*) FROM mail WHERE order_id = 'busy-too-long'
		AND last_error LIKE 'attachment: Hóa đơn.pdf: expired: still failing when the max event age ran out: status: HTTP 503'`))
	require.Equal(t, int64(2), sc.QueryInt(t, `SELECT count(*) FROM outbox WHERE event_type = 'EmailFailed'
		AND payload->'data'->>'error_reason' = 'attachment'`))

	require.InDelta(t, 2*len(invoice), testutil.ToFloat64(m.Stored), 0)
	require.InDelta(t, 1, testutil.ToFloat64(m.Failures.WithLabelValues("checksum")), 0)
	require.InDelta(t, 3, testutil.ToFloat64(m.Failures.WithLabelValues("status")), 0, "404, 503 and 503")
	require.InDelta(t, 1, testutil.ToFloat64(m.Failures.WithLabelValues("expired")), 0)
	require.InDelta(t, 2, testutil.ToFloat64(m.MailsFailed), 0)

	claimed, err := sc.Store.ClaimMails(ctx, store.ClaimParams{Limit: 10, Lease: time.Minute, Worker: "t"})
	require.NoError(t, err)
	got := map[string]bool{}
	for _, c := range claimed {
		got[c.OrderID] = true
	}
	require.Equal(t, map[string]bool{"good": true, "optional-gone": true}, got)

	n, err = st.Once(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "the waiting mail is not due before its backoff")
}

// An optional file the server keeps refusing for now (503) is tried
// OptionalAttempts times, then the mail goes without it: it must not be
// retried until the max age and turn the mail stale.
func TestOptionalFileGivesUpBeforeTheMailGoesStale(t *testing.T) {
	t.Parallel()
	fs := newFileServer(t, routes())
	sc := storetest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := sc.Store.Ingest(ctx, []store.IngestItem{
		mailWith(t, "terms-busy", time.Now().UTC(), pdfAt(fs.url("/invoice.pdf"), false), pdfAt(fs.url("/busy"), true)),
	})
	require.NoError(t, err)
	st := attach.NewStage(attach.Config{
		Fetch: fs.config(), Concurrency: 2, RetryBackoff: time.Minute, RetryBackoffMax: time.Hour,
		PollInterval: time.Second, MaxEventAge: 24 * time.Hour,
	}, sc.Store, attach.NewMetrics(prometheus.NewRegistry()), slog.New(slog.DiscardHandler))
	var states []string
	for range attach.OptionalAttempts {
		n, err := st.Once(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		states = append(states, sc.QueryMap(t, `SELECT order_id, status || '/' || attach_state FROM mail`)["terms-busy"])
		sc.Exec(t, `UPDATE mail SET attach_next_at = now()`) // the backoff, passed
	}
	require.Equal(t, []string{"pending/pending", "pending/pending", "pending/ready"}, states)
	require.Equal(t, int64(1), sc.QueryInt(t, `SELECT count(*) FROM mail_attachment WHERE status = 'omitted' AND attempts = 3
		AND reason = 'expired' AND detail LIKE 'optional: still failing after 3 attempts: status: HTTP 503'`))
	require.Equal(t, int64(1), sc.QueryInt(t, `SELECT count(*) FROM mail_attachment WHERE status = 'fetched'`))
}
