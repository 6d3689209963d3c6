package sender_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/sender"
	"github.com/mailsvc/mailsvc/internal/sender/resend"
	"github.com/mailsvc/mailsvc/internal/sender/resendtest"
	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
)

// absent stands for a feedback event without the provider_detail key.
const absent = "<absent>"

// feedbackDetail returns the type, data.error_reason and the JSON text of
// data.provider_detail (absent when the key is missing) of the test's
// outbox row; it fails unless there is exactly one.
func (b *bundle) feedbackDetail(t *testing.T) (typ mailtype.EventType, reason, detail string) {
	t.Helper()
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM outbox`))
	rows := b.sc.QueryMap(t, `SELECT event_type, COALESCE(payload->'data'->>'error_reason', '') || '|' ||
		CASE WHEN payload->'data' ? 'provider_detail' THEN (payload->'data'->'provider_detail')::text ELSE $1 END
		FROM outbox`, absent)
	require.Len(t, rows, 1)
	for k, v := range rows {
		typ = mailtype.EventType(k)
		reason, detail, _ = strings.Cut(v, "|")
	}
	return typ, reason, detail
}

// requireDetail checks the one feedback event: its type, error reason and
// provider_detail (JSON, or absent).
func (b *bundle) requireDetail(t *testing.T, typ mailtype.EventType, reason mailtype.Reason, detail string) {
	t.Helper()
	gotTyp, gotReason, gotDetail := b.feedbackDetail(t)
	require.Equal(t, typ, gotTyp)
	require.Equal(t, string(reason), gotReason)
	if detail == absent {
		require.Equal(t, absent, gotDetail, "no provider_detail key")
		return
	}
	require.JSONEq(t, detail, gotDetail)
	require.EqualValues(t, 0, b.count(t, `SELECT count(*) FROM outbox WHERE payload::text LIKE '%b@example.com%'`))
}

// TestSMTPProviderDetailIsPublished: EmailFailed and EmailUnknown carry
// the reply code and enhanced status code of the reply that decided them,
// as the fault server wrote them; a failure without a reply, and a sent
// mail, have no provider_detail.
func TestSMTPProviderDetailIsPublished(t *testing.T) {
	t.Parallel()
	type inject struct {
		phase  smtptest.Phase
		faults []smtptest.Fault
	}
	for _, c := range []struct {
		name     string
		inject   []inject
		status   mailtype.Status
		attempts int
		typ      mailtype.EventType
		reason   mailtype.Reason
		detail   string
	}{
		{"550 5.1.1 fails", []inject{{smtptest.Rcpt, []smtptest.Fault{smtptest.ReplyText(550, "5.1.1 <b@example.com> User unknown")}}},
			mailtype.StatusFailed, 1, mailtype.EmailFailed, mailtype.ReasonRejected, `{"smtp_code":550,"smtp_enhanced_code":"5.1.1"}`},
		{"550 without enhanced code fails", []inject{{smtptest.Rcpt, []smtptest.Fault{smtptest.ReplyText(550, "User unknown")}}},
			mailtype.StatusFailed, 1, mailtype.EmailFailed, mailtype.ReasonRejected, `{"smtp_code":550}`},
		{"451 4.3.0 until attempts run out", []inject{{smtptest.Data, []smtptest.Fault{
			smtptest.ReplyText(451, "4.3.0 Local error"), smtptest.ReplyText(451, "4.3.0 Try again")}}},
			mailtype.StatusFailed, 2, mailtype.EmailFailed, mailtype.ReasonAttemptsExceeded, `{"smtp_code":451,"smtp_enhanced_code":"4.3.0"}`},
		{"no reply, then 451 until attempts run out", []inject{{smtptest.Mail, []smtptest.Fault{smtptest.Hang(), smtptest.ReplyText(451, "4.3.0 Try again")}}},
			mailtype.StatusFailed, 2, mailtype.EmailFailed, mailtype.ReasonAttemptsExceeded, `{"smtp_code":451,"smtp_enhanced_code":"4.3.0"}`},
		{"550 5.1.1 after an ambiguous send is unknown", []inject{
			{smtptest.Data, []smtptest.Fault{smtptest.Hang()}},
			// Delay(0) lets the first session's RCPT through.
			{smtptest.Rcpt, []smtptest.Fault{smtptest.Delay(0), smtptest.ReplyText(550, "5.1.1 User unknown")}}},
			mailtype.StatusUnknown, 2, mailtype.EmailUnknown, mailtype.ReasonRejected, `{"smtp_code":550,"smtp_enhanced_code":"5.1.1"}`},
		{"sent", nil, mailtype.StatusSent, 1, mailtype.EmailSent, "", absent},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, smtptest.Options{})
			for _, in := range c.inject {
				b.srv.Inject(in.phase, in.faults...)
			}
			id := b.insert(t, "42")
			cfg := testConfig()
			cfg.MaxAttempts, cfg.SendTimeout = 2, 300*time.Millisecond
			b.start(t, cfg, sender.Deps{})

			b.waitRow(t, id, c.status, c.attempts)
			b.requireDetail(t, c.typ, c.reason, c.detail)
		})
	}
}

// TestResendProviderDetailIsPublished: the same for Resend's HTTP status
// and error name.
func TestResendProviderDetailIsPublished(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		faults   []resendtest.Fault
		status   mailtype.Status
		attempts int
		typ      mailtype.EventType
		reason   mailtype.Reason
		detail   string
	}{
		{"422 validation_error fails", []resendtest.Fault{resendtest.Invalid()},
			mailtype.StatusFailed, 1, mailtype.EmailFailed, mailtype.ReasonRejected, `{"http_status":422,"error_name":"validation_error"}`},
		{"500 spends nothing under a live key, then 422 fails", []resendtest.Fault{resendtest.ServerError(), resendtest.Invalid()},
			mailtype.StatusFailed, 2, mailtype.EmailFailed, mailtype.ReasonRejected, `{"http_status":422,"error_name":"validation_error"}`},
		{"409 reused key is unknown", []resendtest.Fault{resendtest.Error(409, "invalid_idempotent_request")},
			mailtype.StatusUnknown, 1, mailtype.EmailUnknown, mailtype.ReasonIdempotencyReuse, `{"http_status":409,"error_name":"invalid_idempotent_request"}`},
		{"sent", nil, mailtype.StatusSent, 1, mailtype.EmailSent, "", absent},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, smtptest.Options{})
			api := resendtest.New(t, "re_test")
			api.Inject(c.faults...)
			prov, err := resend.New(resend.Config{APIKey: "re_test", BaseURL: api.URL})
			require.NoError(t, err)
			id := b.insert(t, "42")
			cfg := testConfig()
			cfg.MaxAttempts = 2
			b.start(t, cfg, sender.Deps{Provider: prov})

			b.waitRow(t, id, c.status, c.attempts)
			b.requireDetail(t, c.typ, c.reason, c.detail)
			require.Len(t, api.Requests(), c.attempts)
		})
	}
}
