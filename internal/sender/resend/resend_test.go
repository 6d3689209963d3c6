package resend_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/sender"
	"github.com/mailsvc/mailsvc/internal/sender/resend"
	"github.com/mailsvc/mailsvc/internal/sender/resendtest"
	"github.com/mailsvc/mailsvc/internal/sender/sendertest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}

const apiKey = "re_test_key"

func newProvider(t *testing.T, url string) *resend.Provider {
	t.Helper()
	p, err := resend.New(resend.Config{APIKey: apiKey, BaseURL: url})
	require.NoError(t, err)
	return p
}

func TestConformance(t *testing.T) {
	t.Parallel()
	sendertest.Run(t, func(t *testing.T) sendertest.Harness {
		srv := resendtest.New(t, apiKey)
		return sendertest.Harness{
			Provider: newProvider(t, srv.URL),
			Dead:     newProvider(t, "http://"+sendertest.DeadAddr(t)+"/"),
			Inject: func(f sendertest.Fault) {
				switch f {
				case sendertest.Transient:
					srv.Inject(resendtest.ServerError())
				case sendertest.Permanent:
					srv.Inject(resendtest.Invalid())
				case sendertest.LostResponse:
					srv.Inject(resendtest.LoseResponse())
				}
			},
			Delivered: func() int { return len(srv.Sent()) },
		}
	})
}

func send(t *testing.T, s sender.Session, m *sender.Message) (sender.Receipt, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.Send(ctx, m)
}

func TestLostResponseThenRetrySendsOnce(t *testing.T) {
	t.Parallel()
	srv := resendtest.New(t, apiKey)
	s := newProvider(t, srv.URL).NewSession()
	m := sendertest.Message("order-confirmed:42")
	srv.Inject(resendtest.LoseResponse())
	_, err := send(t, s, m)
	require.Equal(t, mailtype.Ambiguous, mailtype.ClassOf(err), "%v", err)
	r, err := send(t, s, m)
	require.NoError(t, err)
	sent := srv.Sent()
	require.Len(t, sent, 1)
	require.Equal(t, sent[0].ID, r.ProviderMessageID, "the retry gets the first response")
	reqs := srv.Requests()
	require.Len(t, reqs, 2)
	require.True(t, reqs[1].Replayed)
	for _, q := range reqs {
		require.Equal(t, "order-confirmed:42", q.IdempotencyKey)
	}
}

func TestRateLimitedCarriesRetryAfter(t *testing.T) {
	t.Parallel()
	srv := resendtest.New(t, apiKey)
	s := newProvider(t, srv.URL).NewSession()
	srv.Inject(resendtest.RateLimited(3))
	_, err := send(t, s, sendertest.Message("k:1"))
	require.Equal(t, mailtype.Transient, mailtype.ClassOf(err))
	require.Equal(t, mailtype.ReasonRateLimited, mailtype.ReasonOf(err))
	trouble, after := sender.TroubleOf(err)
	require.Equal(t, sender.TroubleRateLimited, trouble)
	require.Equal(t, 3*time.Second, after)
	require.True(t, mailtype.Reroutable(err), "a 429 created no email")
	require.Empty(t, srv.Sent())
}

// TestTroubles: what each answer says about Resend rather than the mail
// (Resend API reference, "Errors"; "Usage Limits").
func TestTroubles(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name       string
		fault      resendtest.Fault
		trouble    sender.Trouble
		reroutable bool
	}{
		{"rate limit", resendtest.RateLimited(1), sender.TroubleRateLimited, true},
		{"daily quota", resendtest.DailyQuota(), sender.TroubleQuota, true},
		{"monthly quota", resendtest.MonthlyQuota(), sender.TroubleQuota, true},
		{"403 invalid_api_key", resendtest.Error(403, "invalid_api_key"), sender.TroubleConfig, true},
		{"401", resendtest.Error(401, "missing_api_key"), sender.TroubleConfig, true},
		{"422 is the mail's", resendtest.Invalid(), "", false},
		{"500 is an outage", resendtest.ServerError(), sender.TroubleOutage, false},
		{"lost response is an outage", resendtest.LoseResponse(), sender.TroubleOutage, false},
		{"409 concurrent_idempotent_requests is in progress", resendtest.Error(409, "concurrent_idempotent_requests"), sender.TroubleInProgress, false},
		{"409 resource_locked is in progress", resendtest.Error(409, "resource_locked"), sender.TroubleInProgress, false},
		{"409 invalid_idempotent_request is the mail's", resendtest.Error(409, "invalid_idempotent_request"), "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := resendtest.New(t, apiKey)
			srv.Inject(c.fault)
			_, err := send(t, newProvider(t, srv.URL).NewSession(), sendertest.Message("k:1"))
			trouble, _ := sender.TroubleOf(err)
			require.Equal(t, c.trouble, trouble, "%v", err)
			require.Equal(t, c.reroutable, mailtype.Reroutable(err), "%v", err)
		})
	}
	// Nothing listens at resend.base_url: a refused connection.
	p := newProvider(t, "http://"+sendertest.DeadAddr(t)+"/")
	_, err := send(t, p.NewSession(), sendertest.Message("k:1"))
	trouble, _ := sender.TroubleOf(err)
	require.Equal(t, sender.TroubleConfig, trouble, "%v", err)
	require.True(t, mailtype.Reroutable(err))
}

// TestStandInRateLimit: the stand-in's LimitRate answers as Resend
// documents: rate-limit headers on every response, 429 rate_limit_exceeded
// with retry-after past the limit.
func TestStandInRateLimit(t *testing.T) {
	t.Parallel()
	srv := resendtest.New(t, apiKey)
	srv.LimitRate(2, time.Hour)
	s := newProvider(t, srv.URL).NewSession()
	for i := range 2 {
		_, err := send(t, s, sendertest.Message(fmt.Sprintf("k:%d", i)))
		require.NoError(t, err)
	}
	_, err := send(t, s, sendertest.Message("k:3"))
	trouble, after := sender.TroubleOf(err)
	require.Equal(t, sender.TroubleRateLimited, trouble)
	require.InDelta(t, time.Hour.Seconds(), after.Seconds(), 2)
	require.Equal(t, mailtype.ProviderDetail{HTTPStatus: 429, ErrorName: "rate_limit_exceeded"}, mailtype.DetailOf(err))
	reqs := srv.Requests()
	require.Len(t, reqs, 3)
	require.Equal(t, []int{200, 200, 429}, []int{reqs[0].Status, reqs[1].Status, reqs[2].Status})
	require.False(t, reqs[0].At.IsZero())
}

func TestChangedPayloadIsAnIdempotencyConflict(t *testing.T) {
	t.Parallel()
	srv := resendtest.New(t, apiKey)
	s := newProvider(t, srv.URL).NewSession()
	m := sendertest.Message("k:1")
	_, err := send(t, s, m)
	require.NoError(t, err)
	m.Subject = "changed"
	_, err = send(t, s, m)
	require.Equal(t, mailtype.Ambiguous, mailtype.ClassOf(err), "the key was used: the first attempt may have been sent")
	require.Equal(t, mailtype.ReasonIdempotencyReuse, mailtype.ReasonOf(err))
	require.Len(t, srv.Sent(), 1)
}

func TestConcurrentSameKeyIsTransient(t *testing.T) {
	t.Parallel()
	srv := resendtest.New(t, apiKey)
	p := newProvider(t, srv.URL)
	release := make(chan struct{})
	srv.Inject(resendtest.Hold(release))
	m := sendertest.Message("k:1")
	first := make(chan error, 1)
	go func() {
		_, err := send(t, p.NewSession(), m)
		first <- err
	}()
	require.Eventually(t, func() bool { return srv.InFlight() == 1 }, 5*time.Second, 5*time.Millisecond)
	_, err := send(t, p.NewSession(), m)
	require.Equal(t, mailtype.Transient, mailtype.ClassOf(err), "%v", err)
	close(release)
	require.NoError(t, <-first)
	require.Len(t, srv.Sent(), 1)
}

func TestKeyHeaderAndPayload(t *testing.T) {
	t.Parallel()
	srv := resendtest.New(t, apiKey)
	s := newProvider(t, srv.URL).NewSession()
	long := "order-confirmed:" + strings.Repeat("9", 300)
	m := sendertest.Message(long)
	_, err := send(t, s, m)
	require.NoError(t, err)
	sent := srv.Sent()
	require.Len(t, sent, 1)
	require.Equal(t, mailtype.IdempotencyKey("", long), sent[0].IdempotencyKey)
	require.True(t, strings.HasPrefix(sent[0].IdempotencyKey, "sha256:"))
	require.Equal(t, map[string]string{"Message-ID": m.MessageID}, sent[0].Headers)
	var body map[string]any
	require.NoError(t, json.Unmarshal(sent[0].Payload, &body))
	require.Equal(t, []any{"Nguyễn Văn B <b@example.com>"}, body["to"])
	require.NotContains(t, string(sent[0].Payload), sent[0].IdempotencyKey)
}

func TestUnauthorizedIsTransient(t *testing.T) {
	t.Parallel()
	srv := resendtest.New(t, apiKey)
	p, err := resend.New(resend.Config{APIKey: "re_wrong", BaseURL: srv.URL})
	require.NoError(t, err)
	_, err = send(t, p.NewSession(), sendertest.Message("k:1"))
	require.Equal(t, mailtype.Transient, mailtype.ClassOf(err))
	require.Equal(t, mailtype.ReasonAuth, mailtype.ReasonOf(err))
	require.NotContains(t, err.Error(), "re_wrong")
}

// Every attempt of a mail carries its report tag (mailtype.ReportTag of
// its id and idempotency key), so Resend's webhooks name the mail even
// when its email id was lost; the tag is the same on every attempt, so a
// retry after a lost response is the same payload and Resend replays it.
func TestReportTagOnEveryAttempt(t *testing.T) {
	t.Parallel()
	srv := resendtest.New(t, apiKey)
	s := newProvider(t, srv.URL).NewSession()
	m := sendertest.Message("order-confirmed:42")
	m.ID = 42
	srv.Inject(resendtest.LoseResponse())
	_, err := send(t, s, m)
	require.Equal(t, mailtype.Ambiguous, mailtype.ClassOf(err), "%v", err)
	_, err = send(t, s, m)
	require.NoError(t, err)
	sent := srv.Sent()
	require.Len(t, sent, 1)
	require.Equal(t, map[string]string{mailtype.ReportTagName: mailtype.ReportTag(42, m.IdempotencyKey)}, sent[0].Tags)
	require.Equal(t, []bool{false, true}, replayed(srv.Requests()))

	legacy := sendertest.Message("order-confirmed:43") // no row id: no tag
	_, err = send(t, s, legacy)
	require.NoError(t, err)
	require.Nil(t, srv.Sent()[1].Tags)
}

func replayed(rs []resendtest.Request) []bool {
	out := make([]bool, len(rs))
	for i, r := range rs {
		out[i] = r.Replayed
	}
	return out
}
