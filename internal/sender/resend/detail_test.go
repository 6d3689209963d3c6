package resend_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/sender/resend"
	"github.com/mailsvc/mailsvc/internal/sender/resendtest"
	"github.com/mailsvc/mailsvc/internal/sender/sendertest"
)

// TestProviderDetailOfAnswers: a failed call carries the HTTP status and
// Resend's error name (Resend API reference, "Errors"); a call without an
// answer carries none; a name of another shape than Resend's is dropped.
func TestProviderDetailOfAnswers(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		fault  resendtest.Fault
		class  mailtype.Class
		reason mailtype.Reason
		detail mailtype.ProviderDetail
	}{
		{"422 validation_error", resendtest.Invalid(), mailtype.Permanent, mailtype.ReasonRejected,
			mailtype.ProviderDetail{HTTPStatus: 422, ErrorName: "validation_error"}},
		{"422 invalid_from_address", resendtest.Error(422, "invalid_from_address"), mailtype.Permanent, mailtype.ReasonRejected,
			mailtype.ProviderDetail{HTTPStatus: 422, ErrorName: "invalid_from_address"}},
		{"403 invalid_api_key", resendtest.Error(403, "invalid_api_key"), mailtype.Transient, mailtype.ReasonAuth,
			mailtype.ProviderDetail{HTTPStatus: 403, ErrorName: "invalid_api_key"}},
		{"429 rate_limit_exceeded", resendtest.RateLimited(1), mailtype.Transient, mailtype.ReasonRateLimited,
			mailtype.ProviderDetail{HTTPStatus: 429, ErrorName: "rate_limit_exceeded"}},
		{"429 daily_quota_exceeded", resendtest.Error(429, "daily_quota_exceeded"), mailtype.Transient, mailtype.ReasonRateLimited,
			mailtype.ProviderDetail{HTTPStatus: 429, ErrorName: "daily_quota_exceeded"}},
		{"500", resendtest.ServerError(), mailtype.Transient, mailtype.ReasonServerError,
			mailtype.ProviderDetail{HTTPStatus: 500, ErrorName: "internal_server_error"}},
		{"409 invalid_idempotent_request", resendtest.Error(409, "invalid_idempotent_request"), mailtype.Ambiguous, mailtype.ReasonIdempotencyReuse,
			mailtype.ProviderDetail{HTTPStatus: 409, ErrorName: "invalid_idempotent_request"}},
		{"name with spaces is dropped", resendtest.Error(400, "Bad Request!"), mailtype.Permanent, mailtype.ReasonRejected,
			mailtype.ProviderDetail{HTTPStatus: 400}},
		{"over-long name is dropped", resendtest.Error(400, string(make([]byte, 65))), mailtype.Permanent, mailtype.ReasonRejected,
			mailtype.ProviderDetail{HTTPStatus: 400}},
		{"451 security_error", resendtest.Error(451, "security_error"), mailtype.Permanent, mailtype.ReasonRejected,
			mailtype.ProviderDetail{HTTPStatus: 451, ErrorName: "security_error"}},
		{"lost response", resendtest.LoseResponse(), mailtype.Ambiguous, mailtype.ReasonConnect, mailtype.ProviderDetail{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := resendtest.New(t, apiKey)
			srv.Inject(c.fault)
			_, err := send(t, newProvider(t, srv.URL).NewSession(), sendertest.Message("k:1"))
			require.Equal(t, c.class, mailtype.ClassOf(err), "%v", err)
			require.Equal(t, c.reason, mailtype.ReasonOf(err), "%v", err)
			require.Equal(t, c.detail, mailtype.DetailOf(err), "%v", err)
			require.Len(t, srv.Requests(), 1)
		})
	}
}

// TestUnauthorizedDetail: the stand-in's own 401 for a wrong key.
func TestUnauthorizedDetail(t *testing.T) {
	t.Parallel()
	srv := resendtest.New(t, apiKey)
	p, err := resend.New(resend.Config{APIKey: "re_wrong", BaseURL: srv.URL})
	require.NoError(t, err)
	_, err = send(t, p.NewSession(), sendertest.Message("k:1"))
	require.Equal(t, mailtype.ProviderDetail{HTTPStatus: 401, ErrorName: "missing_api_key"}, mailtype.DetailOf(err))
}
