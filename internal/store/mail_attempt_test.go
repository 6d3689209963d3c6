package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// mail_attempt keeps the sends that were not a first-send success, and
// retention deletes them with their mail.
func TestMailAttemptRowsFollowTheirMail(t *testing.T) {
	t.Parallel()
	b := setupTimeline(t)
	for _, order := range []string{"1", "2"} {
		_, err := storetest.InsertPending(testCtx(t), b.st, storetest.Mail{OrderID: order, ToEmail: order + "@example.com"})
		require.NoError(t, err)
	}
	b.send(t, store.Outcome{Status: mailtype.StatusSent, Provider: "smtp", ProviderMessageID: "250 ok"})
	require.EqualValues(t, 0, b.sc.QueryInt(t, `SELECT count(*) FROM mail_attempt`), "a first send's success writes none")
	b.send(t, store.Outcome{Status: mailtype.StatusFailed, Provider: "smtp", ErrorClass: mailtype.Permanent,
		ErrorReason: mailtype.ReasonRejected, Error: "550 5.1.1 no such user"})
	require.Equal(t, []string{"order-confirmed:2 failed 1 rejected: 550 5.1.1 no such user"}, b.sc.QueryStrings(t,
		`SELECT m.dedupe_key || ' ' || a.status || ' ' || a.send || ' ' || a.error FROM mail_attempt a JOIN mail m ON m.id = a.mail_id`))

	b.sc.Exec(t, `UPDATE mail SET updated_at = now() - interval '2 days'`)
	n, err := b.st.DeleteFinished(testCtx(t), 24*time.Hour, 100)
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	require.EqualValues(t, 0, b.sc.QueryInt(t, `SELECT count(*) FROM mail_attempt`))
}
