package sender_test

import (
	"bytes"
	"context"
	"net/mail"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/sender"
	"github.com/mailsvc/mailsvc/internal/sender/smtp"
	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

func TestDeferredTwiceThenDeliveredOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	b.srv.Inject(smtptest.Data, smtptest.Reply(451, "try later"), smtptest.Reply(451, "try later"))
	id := b.insert(t, "42")
	b.sc.Exec(t, `UPDATE mail SET occurred_at = now() - interval '1 hour' WHERE id = $1`, id)
	_, m := b.start(t, testConfig(), sender.Deps{})

	b.waitRow(t, id, mailtype.StatusSent, 3)
	require.Equal(t, 1, b.srv.Count())
	n, sum := histogram(m.DeliveryLag)
	require.EqualValues(t, 1, n, "one send accepted, one delivery lag")
	require.InDelta(t, 3600, sum, 30, "counted from occurred_at")
	n, _ = histogram(m.ClaimDuration)
	require.GreaterOrEqual(t, n, uint64(3), "each of the three claims was timed")
	require.EqualValues(t, 1, b.events(t, mailtype.EmailSent))
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM outbox`))
	requireAttempts(t, m, "smtp", sender.OutcomeTransient, 2)
	requireAttempts(t, m, "smtp", sender.OutcomeSent, 1)
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM mail WHERE id = $1 AND provider = 'smtp'
		AND sent_at IS NOT NULL AND last_error IS NULL AND locked_until IS NULL`, id))
}

func TestRejectedMailFails(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	b.srv.Inject(smtptest.Rcpt, smtptest.Reply(550, "no such user b@example.com"))
	id := b.insert(t, "42")
	_, m := b.start(t, testConfig(), sender.Deps{})

	b.waitRow(t, id, mailtype.StatusFailed, 1)
	require.Equal(t, 0, b.srv.Count())
	n, _ := histogram(m.DeliveryLag)
	require.Zero(t, n, "nothing accepted")
	require.EqualValues(t, 1, b.events(t, mailtype.EmailFailed))
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM outbox WHERE payload->'data'->>'error_reason' = 'rejected'
		AND payload->'data'->>'error_class' = 'permanent' AND payload::text NOT LIKE '%b@example.com%'`))
	requireAttempts(t, m, "smtp", sender.OutcomePermanent, 1)
}

func TestGreeting421IsRetried(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	b.srv.Inject(smtptest.Greeting, smtptest.Reply(421, "too busy"))
	id := b.insert(t, "42")
	b.start(t, testConfig(), sender.Deps{})

	b.waitRow(t, id, mailtype.StatusSent, 2)
	require.Equal(t, 1, b.srv.Count())
	require.EqualValues(t, 1, b.events(t, mailtype.EmailSent))
}

func TestConnectionClosedAtRcptIsRetried(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	b.srv.Inject(smtptest.Rcpt, smtptest.Drop())
	id := b.insert(t, "42")
	b.start(t, testConfig(), sender.Deps{})

	b.waitRow(t, id, mailtype.StatusSent, 2)
	require.Equal(t, 1, b.srv.Count())
}

func TestDataTakenWithoutReply(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		policy    mailtype.AmbiguousPolicy
		template  sender.TemplateSettings
		status    mailtype.Status
		attempts  int
		delivered int
		event     mailtype.EventType
	}{
		{"retry delivers again", mailtype.PolicyRetry, nil, mailtype.StatusSent, 2, 2, mailtype.EmailSent},
		{"unknown stops", mailtype.PolicyUnknown, nil, mailtype.StatusUnknown, 1, 1, mailtype.EmailUnknown},
		{"template overrides", mailtype.PolicyRetry, policyTemplates(mailtype.PolicyUnknown), mailtype.StatusUnknown, 1, 1, mailtype.EmailUnknown},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, smtptest.Options{})
			b.srv.Inject(smtptest.Data, smtptest.Hang())
			id := b.insert(t, "42")
			cfg := testConfig()
			cfg.SendTimeout = 300 * time.Millisecond
			cfg.AmbiguousPolicy = c.policy
			_, m := b.start(t, cfg, sender.Deps{Templates: c.template})

			b.waitRow(t, id, c.status, c.attempts)
			require.Equal(t, c.delivered, b.srv.Count())
			require.EqualValues(t, 1, b.events(t, c.event))
			require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM outbox`))
			requireAttempts(t, m, "smtp", sender.OutcomeAmbiguous, 1)
			msgs := b.srv.Messages()
			require.Len(t, msgs, c.delivered)
			for _, msg := range msgs[1:] {
				require.Equal(t, msgs[0].Data, msg.Data, "every attempt sends identical bytes")
			}
			parsed, err := mail.ReadMessage(bytes.NewReader(msgs[0].Data))
			require.NoError(t, err)
			require.Equal(t, mailtype.MessageID(key("42"), "example.com"), parsed.Header.Get("Message-ID"))
		})
	}
}

func TestFailedTransactionThenGoodOneOnTheSameWorker(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	b.srv.Inject(smtptest.Data, smtptest.Reply(554, "rejected"))
	first := b.insert(t, "1")
	second := b.insert(t, "2")
	cfg := testConfig()
	cfg.Workers = 1
	b.start(t, cfg, sender.Deps{})

	b.waitRow(t, first, mailtype.StatusFailed, 1)
	b.waitRow(t, second, mailtype.StatusSent, 1)
	msgs := b.srv.Messages()
	require.Len(t, msgs, 1)
	require.Contains(t, string(msgs[0].Data), mailtype.MessageID(key("2"), "example.com"))
}

func TestStartTLSRequiredAgainstPlainServerNeverSendsPlaintext(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	id := b.insert(t, "42")
	cfg := testConfig()
	cfg.RetryBackoff, cfg.RetryBackoffMax = time.Hour, time.Hour
	_, m := b.start(t, cfg, sender.Deps{Provider: b.smtpProvider(t, smtp.TLSStartTLS)})

	b.waitRow(t, id, mailtype.StatusPending, 1)
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM mail WHERE id = $1 AND last_error LIKE 'tls: %'
		AND send_after > now() + interval '20 minutes'`, id))
	require.Equal(t, 0, b.srv.MailCommands())
	require.Equal(t, 0, b.srv.Count())
	require.EqualValues(t, 0, b.count(t, `SELECT sends FROM mail WHERE id = $1`, id), "the configuration's failure spends no attempt")
	require.EqualValues(t, 1, value(m.Unspent.WithLabelValues("smtp", string(sender.TroubleConfig))))
	requireAttempts(t, m, "smtp", sender.OutcomeTransient, 0)
}

func TestStartTLSDelivers(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{STARTTLS: true})
	id := b.insert(t, "42")
	b.start(t, testConfig(), sender.Deps{Provider: b.smtpProvider(t, smtp.TLSStartTLS)})
	b.waitRow(t, id, mailtype.StatusSent, 1)
	require.True(t, b.srv.Messages()[0].TLS)
}

func TestCancelDuringFailingSendEndsCancelled(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	b.srv.Inject(smtptest.Rcpt, smtptest.Hang())
	id := b.insert(t, "42")
	cfg := testConfig()
	cfg.SendTimeout = 700 * time.Millisecond
	b.start(t, cfg, sender.Deps{})

	require.Eventually(t, func() bool { return b.srv.MailCommands() == 1 }, 5*time.Second, 5*time.Millisecond)
	b.sc.Exec(t, `UPDATE mail SET cancel_requested = true WHERE id = $1`, id)

	b.waitRow(t, id, mailtype.StatusCancelled, 1)
	require.EqualValues(t, 1, b.events(t, mailtype.EmailCancelled))
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM outbox`))
	require.Equal(t, 0, b.srv.Count())
	require.Equal(t, 1, b.srv.MailCommands(), "not retried")
}

// TestHardStopBeforeDataRecordsTheCut: a hard stop cuts a send that hangs
// at RCPT, before any mail data: nothing can have been delivered, so the
// cut is recorded as a transient failure and the next pool sends the mail
// once.
func TestHardStopBeforeDataRecordsTheCut(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	b.srv.Inject(smtptest.Rcpt, smtptest.Hang())
	id := b.insert(t, "42")
	cfg := testConfig()
	first, err := sender.New(cfg, sender.Deps{Store: b.sc.Store, Provider: b.smtpProvider(t, smtp.TLSNone)})
	require.NoError(t, err)
	require.NoError(t, first.Start(context.Background()))
	require.Eventually(t, func() bool { return b.srv.Queued(smtptest.Rcpt) == 0 }, 5*time.Second, 5*time.Millisecond)

	cut, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, first.Stop(cut), context.Canceled)

	_, m := b.start(t, testConfig(), sender.Deps{})
	b.waitRow(t, id, mailtype.StatusSent, 2)
	require.Equal(t, 1, b.srv.Count())
	require.EqualValues(t, 1, b.events(t, mailtype.EmailSent))
	require.EqualValues(t, 0, b.count(t, `SELECT ambiguous FROM mail WHERE id = $1`, id))
	require.Equal(t, 0, int(value(m.LeaseReclaims)))
	require.NoError(t, first.Stop(context.Background()), "Stop is idempotent")
}

// TestUnstartedClaimIsReclaimedSilently is item 1 of the fault issue: a
// row a crashed process claimed but never handed to the provider is
// reclaimed once its lease expires and sent, under the unknown policy too:
// not reported unknown, no attempt spent.
func TestUnstartedClaimIsReclaimedSilently(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	id := b.insert(t, "42")
	b.sc.Exec(t, `UPDATE mail SET status = 'sending', attempts = 1, first_claimed_at = now(), locked_by = 'killed',
		locked_until = now() - interval '1 second' WHERE id = $1`, id)
	cfg := testConfig()
	cfg.AmbiguousPolicy = mailtype.PolicyUnknown
	_, m := b.start(t, cfg, sender.Deps{})

	b.waitRow(t, id, mailtype.StatusSent, 2)
	require.Equal(t, 1, b.srv.Count())
	require.EqualValues(t, 0, b.events(t, mailtype.EmailUnknown))
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM outbox WHERE event_type = 'EmailSent'
		AND payload->'data'->>'attempts' = '1'`), "the crashed claim spent no attempt")
	require.Equal(t, 1, int(value(m.LeaseReclaims)))
}

// TestLateWriteOfAPartitionedWorkerIsFenced: a worker froze mid-send
// (SIGSTOP) past its lease; the janitor settles the started send as
// ambiguous, another pool sends it after the grace, and the frozen
// worker's late answer is fenced.
func TestLateWriteOfAPartitionedWorkerIsFenced(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	id := b.insert(t, "42")
	stalled := newStallProvider()
	cfg := testConfig()
	// A lease of 1.5 s: short enough for three to pass quickly, long
	// enough that a heartbeat on a loaded 2-core machine is never late.
	cfg.Workers, cfg.Lease, cfg.SendTimeout = 1, 1500*time.Millisecond, 1200*time.Millisecond
	fs := &flakyStore{Store: b.sc.Store}
	_, mA := b.start(t, cfg, sender.Deps{Store: fs, Provider: stalled})
	require.Equal(t, key("42"), <-stalled.started)
	fs.partitioned.Store(true)

	j, _ := b.janitor(t, func(c *sender.JanitorConfig) {
		c.Interval, c.Sender.DBTimeout = 50*time.Millisecond, 100*time.Millisecond
	}, nil)
	require.NoError(t, j.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, j.Stop(context.Background())) })
	_, mB := b.start(t, testConfig(), sender.Deps{})
	b.waitRow(t, id, mailtype.StatusSent, 2)
	close(stalled.release)

	require.Eventually(t, func() bool { return value(mA.FencingRejections) == 1 }, 5*time.Second, 5*time.Millisecond)
	requireAttempts(t, mA, "smtp", sender.OutcomeFenced, 1)
	requireAttempts(t, mA, "smtp", sender.OutcomeSent, 0)
	require.Equal(t, 0, int(value(mB.LeaseReclaims)), "a started send is never reclaimed by a claim")
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM mail WHERE id = $1 AND status = 'sent' AND attempts = 2
		AND ambiguous = 1 AND sends = 2 AND provider_message_id <> 'stalled-ok'`, id))
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM outbox`))
	require.Equal(t, 1, b.srv.Count())
}

func TestHeartbeatKeepsASlowWorkerOwner(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	id := b.insert(t, "42")
	stalled := newStallProvider()
	cfg := testConfig()
	// A lease of 1.5 s: short enough for three to pass quickly, long
	// enough that a heartbeat on a loaded 2-core machine is never late.
	cfg.Workers, cfg.Lease, cfg.SendTimeout = 1, 1500*time.Millisecond, 1200*time.Millisecond
	_, mA := b.start(t, cfg, sender.Deps{Provider: stalled})
	<-stalled.started
	_, mB := b.start(t, testConfig(), sender.Deps{})

	// The heartbeat pushes the lease forward until it has outlived three
	// of the original leases; all along the other pool polls and never
	// takes the row over.
	leaseEnd := func() int64 {
		return b.count(t, `SELECT (extract(epoch FROM locked_until) * 1000)::bigint FROM mail WHERE id = $1`, id)
	}
	first := leaseEnd()
	require.Eventually(t, func() bool { return leaseEnd() > first+4500 }, 20*time.Second, 20*time.Millisecond)
	require.Equal(t, 0, int(value(mB.LeaseReclaims)))
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM mail WHERE id = $1 AND status = 'sending' AND attempts = 1`, id))
	close(stalled.release)
	b.waitRow(t, id, mailtype.StatusSent, 1)
	// The recorder counts the attempt right after its commit.
	requireAttempts(t, mA, "smtp", sender.OutcomeSent, 1)
	require.Equal(t, 0, b.srv.Count())
}

func TestSentSurvivesPassingDatabaseErrors(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	id := b.insert(t, "42")
	fs := &flakyStore{Store: b.sc.Store}
	fs.finishFailures.Store(3)
	b.start(t, testConfig(), sender.Deps{Store: fs})

	b.waitRow(t, id, mailtype.StatusSent, 1)
	require.Equal(t, 1, b.srv.Count())
	require.EqualValues(t, 1, b.events(t, mailtype.EmailSent))
}

func TestWakeClaimsWithoutWaitingForThePoll(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	cfg := testConfig()
	cfg.PollInterval = time.Hour
	p, _ := b.start(t, cfg, sender.Deps{})
	// Let the first claim find nothing, so the pool waits for the poll.
	require.Eventually(t, func() bool { return b.count(t, `SELECT count(*) FROM mail`) == 0 }, time.Second, 10*time.Millisecond)
	id := b.insert(t, "42")
	start := time.Now()
	p.Wake()
	b.waitRow(t, id, mailtype.StatusSent, 1)
	require.Less(t, time.Since(start), 10*time.Second)
}

func TestRateLimitSpacesProviderCalls(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	for i := range 5 {
		b.insert(t, string(rune('a'+i)))
	}
	cfg := testConfig()
	cfg.RateLimit, cfg.BatchSize, cfg.Workers = 10, 1, 4
	start := time.Now()
	b.start(t, cfg, sender.Deps{})
	require.Eventually(t, func() bool { return b.srv.Count() == 5 }, 10*time.Second, 5*time.Millisecond)
	// A burst of one, then one token every 100 ms.
	require.GreaterOrEqual(t, time.Since(start), 350*time.Millisecond)
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM mail WHERE status = 'sent' AND attempts = 1`) == 5
	}, 10*time.Second, 10*time.Millisecond)
}

func TestManyMailsEachSentOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	require.NoError(t, storetest.Seed(context.Background(), b.sc.Store, "bulk-", mailtype.StatusPending, 300))
	cfg := testConfig()
	cfg.Workers = 4
	b.start(t, cfg, sender.Deps{})
	b.start(t, cfg, sender.Deps{})
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM mail WHERE status = 'sent' AND attempts = 1`) == 300
	}, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, 300, b.srv.Count())
	require.EqualValues(t, 300, b.events(t, mailtype.EmailSent))
}

func TestStopWithoutStartAndStartTwice(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	p, err := sender.New(testConfig(), sender.Deps{Store: b.sc.Store, Provider: b.smtpProvider(t, smtp.TLSNone)})
	require.NoError(t, err)
	require.NoError(t, p.Stop(context.Background()))
	require.NoError(t, p.Stop(context.Background()))
	require.Error(t, p.Start(context.Background()))
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Lease = cfg.SendTimeout
	cfg.AmbiguousPolicy = "maybe"
	cfg.From = ""
	_, err := sender.New(cfg, sender.Deps{})
	require.ErrorContains(t, err, "sender.lease")
	require.ErrorContains(t, err, "sender.ambiguous_policy")
	require.ErrorContains(t, err, "mail.from")
}

func TestStopLetsInFlightSendsFinish(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	id := b.insert(t, "42")
	stalled := newStallProvider()
	cfg := testConfig()
	p, err := sender.New(cfg, sender.Deps{Store: b.sc.Store, Provider: stalled})
	require.NoError(t, err)
	require.NoError(t, p.Start(context.Background()))
	<-stalled.started

	stopped := make(chan error, 1)
	go func() { stopped <- p.Stop(context.Background()) }()
	close(stalled.release)
	// Stop returns once the send in flight was recorded.
	require.NoError(t, <-stopped)
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM mail WHERE id = $1 AND status = 'sent' AND attempts = 1`, id))
	require.EqualValues(t, 1, b.events(t, mailtype.EmailSent))
}

// After a database outage the claim backoff has grown (here to 1.6-3.2 s
// after seven failed claims); the consumer's wake-up after its first
// commit ends it, so the pool resumes within about poll_interval, not at
// the end of the backoff.
func TestWakeEndsTheClaimBackoffAfterAnOutage(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	fs := &flakyStore{Store: b.sc.Store}
	fs.partitioned.Store(true)
	p, m := b.start(t, testConfig(), sender.Deps{Store: fs})
	require.Eventually(t, func() bool { n, _ := histogram(m.ClaimDuration); return n >= 7 }, 15*time.Second, time.Millisecond)

	fs.partitioned.Store(false)
	id := b.insert(t, "42")
	woke := time.Now()
	p.Wake()
	b.waitRow(t, id, mailtype.StatusSent, 1)
	took := time.Since(woke)
	require.Less(t, took, time.Second, "resumed %s after the wake-up, not after the backoff", took)
}
