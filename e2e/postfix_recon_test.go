package e2e

import (
	"fmt"
	"github.com/mailsvc/mailsvc/internal/e2etest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
	"github.com/mailsvc/mailsvc/internal/testproxy"
)

// A lost 250 settled by the relay's own evidence. mailsvc sends one mail
// to Postfix through a proxy that loses Postfix's reply to the end of the
// data and closes the connection: Postfix took the mail, mailsvc cannot
// know, and under sender.ambiguous_policy unknown the mail ends unknown
// (EmailUnknown). Postfix hands it on to the next hop, which offers no DSN,
// so Postfix itself sends the success report mailsvc asked for
// (NOTIFY=SUCCESS, RFC 3461; Action: relayed, RFC 3464) to the mail's VERP
// address; mailsvc's bounce listener takes it and settles the mail: sent,
// with EmailSent and EmailDelivered marked reconciled_by
// provider_evidence, in that order after the EmailUnknown. The next hop
// got the mail exactly once: nothing was sent twice.
func TestPostfixLost250SettledBySuccessDSN(t *testing.T) {
	t.Parallel()
	remote := smtptest.New(t, smtptest.Options{})
	bounces := fmt.Sprintf("127.0.0.1:%d", e2etest.FreePort(t))
	pf := startPostfix(t, "bounce.mailsvc.test", bounces, remote.Addr)
	cutter := testproxy.NewReplyCutter(t, pf.Addr)
	cutter.LoseDataReplies(1)
	s := e2etest.NewStack(t, cutter.Addr)
	fb := e2etest.NewFeedbackQueue(t, s.Names)
	pub := e2etest.NewPublisher(t, s.Names)
	_, err := s.CLI("migrate")
	require.NoError(t, err)
	s.Serve(map[string]string{"MAILSVC_BOUNCES_ADDRESS": "bounces@bounce.mailsvc.test",
		"MAILSVC_BOUNCES_SECRET": "a-secret-of-32-bytes-for-the-tests", "MAILSVC_BOUNCES_ADDR": bounces,
		"MAILSVC_SENDER_AMBIGUOUS_POLICY": "unknown"})

	ev := e2etest.Confirmed(1, "en")
	ev.Data["email"] = "customer1@kept.test"
	pub.Publish(t, ev)
	got := fb.Collect(t, 3, 2*time.Minute)
	var seq []string
	for _, f := range got {
		r, _ := f.Data["reconciled_by"].(string)
		seq = append(seq, f.EventType+" "+f.Data["status"].(string)+" "+r)
	}
	require.Equal(t, []string{"EmailUnknown unknown ", "EmailSent sent provider_evidence", "EmailDelivered sent provider_evidence"}, seq)
	for _, f := range got[1:] {
		pe := f.Data["provider_event"].(map[string]any)
		require.Equal(t, "email.delivered", pe["type"])
		require.Equal(t, "smtp", f.Data["provider"])
		require.EqualValues(t, 1, f.Data["attempts"], "one send")
	}
	require.Equal(t, 1, cutter.Lost())
	m := show(t, s, "order-confirmed:1")
	require.Equal(t, "sent", m.Status)
	out, err := s.CLI("mail", "show", "order-confirmed:1")
	require.NoError(t, err)
	require.Contains(t, out, "settled by provider evidence: email.delivered")
	require.Equal(t, 1, remote.Count(), "the next hop got the mail once")
	require.Equal(t, 1, remote.MailCommands())
}
