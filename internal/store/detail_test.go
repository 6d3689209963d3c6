package store_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// TestOutcomeDetailIsPublished: an outcome's provider detail goes to its
// EmailFailed or EmailUnknown as data.provider_detail, with omitempty
// fields; without detail, and on EmailSent, the key is absent. last_error
// stays "reason: message".
func TestOutcomeDetailIsPublished(t *testing.T) {
	t.Parallel()
	sc := storetest.New(t)
	ctx := context.Background()
	insertMails(t, sc.Store, 4, "o")
	got, err := sc.Store.ClaimMails(ctx, claimParams(4))
	require.NoError(t, err)
	require.Len(t, got, 4)
	smtp := mailtype.ProviderDetail{SMTPCode: 550, SMTPEnhancedCode: "5.1.1"}
	outcomes := []store.Outcome{
		{Status: mailtype.StatusFailed, Provider: "smtp", ErrorClass: mailtype.Permanent, ErrorReason: mailtype.ReasonRejected,
			Error: "550 5.1.1 user unknown", Detail: smtp},
		{Status: mailtype.StatusUnknown, Provider: "resend", ErrorClass: mailtype.Ambiguous, ErrorReason: mailtype.ReasonIdempotencyReuse,
			Error: "409", Detail: mailtype.ProviderDetail{HTTPStatus: 409, ErrorName: "invalid_idempotent_request"}},
		{Status: mailtype.StatusFailed, Provider: "smtp", ErrorClass: mailtype.Permanent, ErrorReason: mailtype.ReasonAttemptsExceeded,
			Error: "timeout"},
		{Status: mailtype.StatusSent, Provider: "smtp", Detail: smtp},
	}
	as := make([]store.Attempt, len(got))
	keys := make([]string, len(got))
	for i, m := range got {
		as[i] = store.Attempt{Fence: m.Fence, Outcome: outcomes[i]}
		keys[i] = m.DedupeKey
	}
	res, err := sc.Store.FinishAttempts(ctx, as)
	require.NoError(t, err)
	require.Len(t, res, 4)
	for _, r := range res {
		require.NoError(t, r.Err)
	}

	details := sc.QueryMap(t, `SELECT dedupe_key, CASE WHEN payload->'data' ? 'provider_detail'
		THEN (payload->'data'->'provider_detail')::text ELSE '<absent>' END FROM outbox`)
	require.Len(t, details, 4)
	require.JSONEq(t, `{"smtp_code":550,"smtp_enhanced_code":"5.1.1"}`, details[keys[0]])
	require.JSONEq(t, `{"http_status":409,"error_name":"invalid_idempotent_request"}`, details[keys[1]])
	require.Equal(t, "<absent>", details[keys[2]])
	require.Equal(t, "<absent>", details[keys[3]], "EmailSent carries no failure detail")
	require.EqualValues(t, 1, sc.QueryInt(t, `SELECT count(*) FROM mail WHERE dedupe_key = $1
		AND last_error = 'rejected: 550 5.1.1 user unknown'`, keys[0]))
}
