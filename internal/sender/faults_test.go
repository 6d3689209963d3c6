package sender_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/sender"
	"github.com/mailsvc/mailsvc/internal/sender/resend"
	"github.com/mailsvc/mailsvc/internal/sender/resendtest"
	"github.com/mailsvc/mailsvc/internal/sender/smtp"
	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
	"github.com/mailsvc/mailsvc/internal/testproxy"
)

// The tests of this file are the fault issue's recipes, one per item,
// against the real PostgreSQL, the fault SMTP server, the Resend stand-in
// and a proxy in front of the database.

// TestSilentRelayGetsAtMostOneResend (item 2): a relay that reads the
// whole DATA and never replies gets the mail twice, not max_attempts
// times: one resend after the first ambiguous outcome, then unknown.
func TestSilentRelayGetsAtMostOneResend(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{LoseReplyFor: func(string) bool { return true }})
	id := b.insert(t, "42")
	cfg := testConfig()
	cfg.SendTimeout = 300 * time.Millisecond
	_, m := b.start(t, cfg, sender.Deps{})

	b.waitRow(t, id, mailtype.StatusUnknown, 2)
	require.Equal(t, 2, b.srv.Count())
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM mail WHERE id = $1 AND sends = 2 AND ambiguous = 2`, id))
	require.EqualValues(t, 1, b.events(t, mailtype.EmailUnknown))
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM outbox`))
	require.Eventually(t, func() bool { return value(m.Ambiguous.WithLabelValues("smtp", sender.NextUnknown)) == 1 },
		5*time.Second, 5*time.Millisecond)
	require.EqualValues(t, 1, value(m.Ambiguous.WithLabelValues("smtp", sender.NextRetry)))
}

// TestDedupingRelayIsRetriedBeyondTheBudget (item 2): with
// smtp.idempotency_header set the relay drops a resend it has seen, so
// ambiguous outcomes are retried past the budget, each with the same key.
func TestDedupingRelayIsRetriedBeyondTheBudget(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	b.srv.Inject(smtptest.Data, smtptest.Hang(), smtptest.Hang(), smtptest.Hang())
	id, err := storetest.InsertPending(context.Background(), b.sc.Store, storetest.Mail{OrderID: "42",
		From: from, IdempotencyKey: "ns:" + key("42")})
	require.NoError(t, err)
	prov, err := smtp.New(smtp.Config{Host: b.srv.Host, Port: b.srv.Port, TLS: smtp.TLSNone,
		IdempotencyHeader: "Resend-Idempotency-Key"})
	require.NoError(t, err)
	cfg := testConfig()
	cfg.SendTimeout = 300 * time.Millisecond
	b.start(t, cfg, sender.Deps{Provider: prov})

	b.waitRow(t, id, mailtype.StatusSent, 4)
	msgs := b.srv.Messages()
	require.Len(t, msgs, 4)
	for _, m := range msgs {
		require.Contains(t, string(m.Data), "Resend-Idempotency-Key: ns:order-confirmed:42\r\n")
		require.Equal(t, msgs[0].Data, m.Data, "every attempt sends identical bytes")
	}
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM mail WHERE id = $1 AND ambiguous = 3`, id))
}

// TestAcceptedSendOutlivesADatabaseOutage (item 3): the server answers 250,
// then PostgreSQL is unreachable for more than three leases for every
// replica. The mail is recorded sent once, with one EmailSent, and never
// sent again: the worker keeps its outcome until the database answers, and
// the janitor gives an expired started send a grace measured from then.
func TestAcceptedSendOutlivesADatabaseOutage(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{DataDelay: 300 * time.Millisecond})
	px := testproxy.New(t, testproxy.HostPort(t, b.sc.URL, "5432"))
	st, err := store.Open(context.Background(), store.Options{URL: px.RewriteURL(t, b.sc.URL), MaxConns: 6})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	id := b.insert(t, "42")
	cfg := testConfig()
	cfg.DBTimeout = time.Second
	b.start(t, cfg, sender.Deps{Store: st})
	other := cfg
	other.WorkerID = "other"
	b.start(t, other, sender.Deps{Store: st})
	j, err := sender.NewJanitor(sender.JanitorConfig{Sender: cfg, Interval: 100 * time.Millisecond},
		sender.JanitorDeps{Store: st, Provider: b.smtpProvider(t, smtp.TLSNone)})
	require.NoError(t, err)
	require.NoError(t, j.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, j.Stop(context.Background())) })

	require.Eventually(t, func() bool { return b.srv.Count() == 1 }, 10*time.Second, time.Millisecond)
	px.Cut() // the 250 is on its way
	// The outage lasts until, on the database clock (read past the proxy),
	// three leases have passed since the send's mark renewed the lease.
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM mail WHERE id = $1 AND locked_until < now() - $2::interval`, id, 2*cfg.Lease) == 1
	}, 30*time.Second, 50*time.Millisecond, "the outage outlasts three leases")
	px.Restore(t)

	b.waitRow(t, id, mailtype.StatusSent, 1)
	require.Equal(t, 1, b.srv.Count())
	require.Equal(t, 1, b.srv.MailCommands(), "never handed over again")
	require.EqualValues(t, 1, b.events(t, mailtype.EmailSent))
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM outbox`))
}

// TestSendNeverStartsWithoutRoomInItsLease (item 4): when the
// send-started mark (which renews the lease) returns too late for a whole
// send to fit, deadline and margin included, in the lease, the row is
// released unsent, spending nothing; it is sent once the database is fast.
func TestSendNeverStartsWithoutRoomInItsLease(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	id := b.insert(t, "42")
	cfg := testConfig()
	cfg.Workers, cfg.Lease, cfg.SendTimeout = 1, time.Second, 500*time.Millisecond
	fs := &flakyStore{Store: b.sc.Store}
	fs.markDelay.Store(int64(600 * time.Millisecond))
	b.start(t, cfg, sender.Deps{Store: fs})

	require.Eventually(t, func() bool { return fs.marks.Load() >= 3 }, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, 0, b.srv.MailCommands())
	require.EqualValues(t, 0, b.count(t, `SELECT count(*) FROM mail WHERE id = $1 AND sends > 1`, id))
	fs.markDelay.Store(0)
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM mail WHERE id = $1 AND status = 'sent'`, id) == 1
	}, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, 1, b.srv.Count())
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM outbox WHERE event_type = 'EmailSent'
		AND payload->'data'->>'attempts' = '1'`), "the released claims spent nothing")
}

// TestFailingRenewalsNeverLetTwoReplicasSendOneMail (item 4): a replica
// whose lease renewals fail, with slow sends and a queue, beside a healthy
// one: every mail is delivered exactly once.
func TestFailingRenewalsNeverLetTwoReplicasSendOneMail(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{DataDelay: 250 * time.Millisecond})
	for i := range 6 {
		b.insert(t, string(rune('a'+i)))
	}
	cfg := testConfig()
	cfg.Workers, cfg.Lease, cfg.SendTimeout = 1, 600*time.Millisecond, 400*time.Millisecond
	fs := &flakyStore{Store: b.sc.Store}
	fs.renewalsFail.Store(true)
	b.start(t, cfg, sender.Deps{Store: fs})
	other := cfg
	other.WorkerID = "other"
	b.start(t, other, sender.Deps{})

	require.Eventually(t, func() bool { return b.count(t, `SELECT count(*) FROM mail WHERE status = 'sent'`) == 6 },
		20*time.Second, 10*time.Millisecond)
	require.Equal(t, 6, b.srv.Count(), "one delivery per mail")
	perKey := map[string]int{}
	for _, m := range b.srv.Messages() {
		perKey[string(bytes.SplitN(bytes.SplitN(m.Data, []byte("X-Dedupe-Key: "), 2)[1], []byte("\r\n"), 2)[0])]++
	}
	require.Len(t, perKey, 6)
	require.EqualValues(t, 6, b.events(t, mailtype.EmailSent))
	require.EqualValues(t, 0, b.count(t, `SELECT count(*) FROM mail WHERE ambiguous > 0`))
}

// TestConfigChangeBetweenAttemptsSendsIdenticalPayload (item 6): the
// first attempt's response is lost; before the retry, mail.from changes.
// The retry sends the payload stored with the row, byte for byte, so
// Resend replays its first response instead of answering 409.
func TestConfigChangeBetweenAttemptsSendsIdenticalPayload(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	api := resendtest.New(t, "re_test")
	api.Inject(resendtest.LoseResponse())
	prov, err := resend.New(resend.Config{APIKey: "re_test", BaseURL: api.URL})
	require.NoError(t, err)
	id, err := storetest.InsertPending(context.Background(), b.sc.Store, storetest.Mail{OrderID: "42",
		From: "Shop A <orders@a.example>", ToName: "Nguyễn Văn B", ReplyTo: "help@a.example", IdempotencyKey: "ns:" + key("42")})
	require.NoError(t, err)
	cfg := testConfig()
	cfg.From = "Shop A <orders@a.example>"
	// The retry is due a second after the lost response: long enough that
	// the first pool, still running while the test sees the row pending,
	// does not make it itself (with the default 10 ms it sometimes did, and
	// the row ended sent by the old configuration).
	cfg.RetryBackoff, cfg.RetryBackoffMax = time.Second, time.Second
	first, err := sender.New(cfg, sender.Deps{Store: b.sc.Store, Provider: prov})
	require.NoError(t, err)
	require.NoError(t, first.Start(context.Background()))
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM mail WHERE id = $1 AND status = 'pending' AND ambiguous = 1`, id) == 1
	}, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, first.Stop(context.Background()))

	cfg.From = "Shop B <orders@b.example>" // the operator changed mail.from
	b.start(t, cfg, sender.Deps{Provider: prov})
	// Two calls, one send spent: the lost response under a live key spent
	// none. The claim counter may be higher: the first pool can claim the
	// row again before its stop and release it unsent.
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM mail WHERE id = $1 AND status = 'sent' AND sends = 1 AND ambiguous = 1`, id) == 1
	}, 15*time.Second, 10*time.Millisecond, "mail %d never sent with 1 send", id)

	reqs := api.Requests()
	require.Len(t, reqs, 2)
	require.True(t, reqs[1].Replayed, "Resend replayed the first response: the same key and payload")
	sent := api.Sent()
	require.Len(t, sent, 1)
	require.True(t, bytes.Contains(sent[0].Payload, []byte(`"from":"Shop A \u003corders@a.example\u003e"`)) ||
		bytes.Contains(sent[0].Payload, []byte(`"from":"Shop A <orders@a.example>"`)), string(sent[0].Payload))
	require.Contains(t, string(sent[0].Payload), `"reply_to":"help@a.example"`)
	require.Equal(t, "ns:"+key("42"), sent[0].IdempotencyKey)
	require.EqualValues(t, 0, b.events(t, mailtype.EmailFailed))
	require.EqualValues(t, 1, b.events(t, mailtype.EmailSent))
}

// TestNamespacedKeysKeepDeploymentsApart (item 11): two deployments (two
// databases) sharing one Resend account send the same order's
// confirmation within 24 h: each is created, none is a replay.
func TestNamespacedKeysKeepDeploymentsApart(t *testing.T) {
	t.Parallel()
	api := resendtest.New(t, "re_test")
	prov, err := resend.New(resend.Config{APIKey: "re_test", BaseURL: api.URL})
	require.NoError(t, err)
	for _, deployment := range []*bundle{setup(t, smtptest.Options{}), setup(t, smtptest.Options{})} {
		ns, err := deployment.sc.Store.IdempotencyNamespace(context.Background(), "")
		require.NoError(t, err)
		require.Len(t, ns, 36, "the deployment id is a UUID")
		id, err := storetest.InsertPending(context.Background(), deployment.sc.Store, storetest.Mail{OrderID: "42",
			From: from, IdempotencyKey: mailtype.IdempotencyKey(ns, key("42"))})
		require.NoError(t, err)
		deployment.start(t, testConfig(), sender.Deps{Provider: prov})
		deployment.waitRow(t, id, mailtype.StatusSent, 1)
	}
	sent := api.Sent()
	require.Len(t, sent, 2)
	require.NotEqual(t, sent[0].IdempotencyKey, sent[1].IdempotencyKey)
	for _, r := range api.Requests() {
		require.False(t, r.Replayed)
	}
}

// TestRefusalAfterAnAmbiguousSendIsNeverFailed (item 5): the relay took
// DATA and never answered, then refused every retry. The first copy may
// have been delivered, so the mail ends unknown, not failed: neither a
// permanent refusal nor exhausted attempts prove it was not delivered.
func TestRefusalAfterAnAmbiguousSendIsNeverFailed(t *testing.T) {
	t.Parallel()
	for name, refusal := range map[string][]smtptest.Fault{
		"permanent": {smtptest.Reply(554, "rejected")},
		"exhausted": {smtptest.Reply(451, "later"), smtptest.Reply(451, "later"), smtptest.Reply(451, "later"), smtptest.Reply(451, "later")},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, smtptest.Options{})
			b.srv.Inject(smtptest.Data, smtptest.Hang())
			id := b.insert(t, "42")
			cfg := testConfig()
			cfg.SendTimeout = 300 * time.Millisecond
			b.start(t, cfg, sender.Deps{})
			// The relay took DATA and hangs until the 300 ms deadline: the
			// refusals are for the retries only.
			require.Eventually(t, func() bool { return b.srv.Count() == 1 }, 10*time.Second, time.Millisecond)
			b.srv.Inject(smtptest.Rcpt, refusal...)

			b.waitRow(t, id, mailtype.StatusUnknown, 1+len(refusal))
			require.Equal(t, 1, b.srv.Count(), "the one copy the relay took")
			require.EqualValues(t, 0, b.events(t, mailtype.EmailFailed))
			require.EqualValues(t, 1, b.events(t, mailtype.EmailUnknown))
			require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM outbox`))
		})
	}
}
