package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// The operator actions on a mail (the audit log of migration 00230)
// appear on its timeline, and only those of that mail. The table is
// created here when the schema does not have it yet, with the columns
// the timeline reads.
func TestTimelineShowsTheOperatorActionsOnTheMail(t *testing.T) {
	t.Parallel()
	b := setupTimeline(t)
	_, err := storetest.InsertPending(testCtx(t), b.st, storetest.Mail{OrderID: "8", ToEmail: "h@example.com"})
	require.NoError(t, err)
	b.sc.Exec(t, `CREATE TABLE IF NOT EXISTS audit_log (
		id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, at timestamptz NOT NULL DEFAULT now(),
		actor text NOT NULL, via text NOT NULL, action text NOT NULL, target text NOT NULL, dedupe_key text,
		reason text NOT NULL DEFAULT '', result text NOT NULL, detail text)`)
	at := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	for _, key := range []string{"order-confirmed:8", "order-confirmed:9"} {
		b.sc.Exec(t, `INSERT INTO audit_log (at, actor, via, action, target, dedupe_key, reason, result)
			VALUES ($1, 'ann', 'console', 'resend', $2, $2, 'customer asked', 'done')`, at, key)
	}

	got := b.timeline(t, "order-confirmed:8")
	require.Len(t, got, 3) // received, pending, the resend
	require.True(t, at.Equal(got[2].At), got[2].At)
	require.Equal(t, store.TimelineEntry{At: got[2].At, Kind: store.TimelineOperator, Summary: "resend by ann (console): done",
		Detail: map[string]string{"actor": "ann", "via": "console", "action": "resend", "target": "order-confirmed:8",
			"reason": "customer asked", "result": "done"}}, got[2])
}

// A started row (its process stopped before recording the result) reads
// as an outcome unknown on the timeline.
func TestTimelineShowsAStartedActionAsUnknown(t *testing.T) {
	t.Parallel()
	b := setupTimeline(t)
	_, err := storetest.InsertPending(testCtx(t), b.st, storetest.Mail{OrderID: "8", ToEmail: "h@example.com"})
	require.NoError(t, err)
	at := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	b.sc.Exec(t, `INSERT INTO audit_log (at, actor, via, action, target, dedupe_key, reason, result)
		VALUES ($1, 'ann', 'cli', 'resend', 'order-confirmed:8', 'order-confirmed:8', 'asked', 'started')`, at)
	got := b.timeline(t, "order-confirmed:8")
	require.Len(t, got, 3)
	require.Equal(t, "resend by ann (cli): outcome unknown: the process stopped before recording the result; check the mail", got[2].Summary)
	require.Equal(t, "started", got[2].Detail["result"])
}
