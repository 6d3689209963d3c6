package cli

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
)

func TestVerdictOfACancelledMail(t *testing.T) {
	t.Parallel()
	const mayHaveGone = "cancelled, but the outcome of the last send is unknown (it ended without an answer): " +
		"the mail may have been delivered; check the provider for message_id"
	for _, c := range []struct {
		name      string
		eventID   string
		attempts  int
		lastError string
		want      string
	}{
		{"lease expired mid-send (janitor)", "e1", 1,
			"lease_expired: the lease expired during a send whose outcome is unknown; the mail may have been delivered", mayHaveGone},
		{"lease expired mid-send (older janitor text)", "e1", 1, "attempts_exhausted: lease_expired", mayHaveGone},
		{"answer lost", "e1", 2, "timeout: timeout (ambiguous): reset after DATA", mayHaveGone},
		{"refused by the server", "e1", 1, "deferred: deferred (transient): 451 try later", "not sent: the order was cancelled"},
		{"never attempted", "e1", 0, "", "not sent: the order was cancelled"},
		{"tombstone", "", 0, "", "not sent: the order was cancelled before its confirmation arrived (tombstone)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m := store.MailView{Status: mailtype.StatusCancelled, EventID: c.eventID, Attempts: c.attempts, LastError: c.lastError}
			require.Equal(t, c.want, verdict(m))
		})
	}
}
