package e2e

import (
	"github.com/mailsvc/mailsvc/internal/e2etest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// countTypes counts feedback events by type.
func countTypes(fs []e2etest.Feedback) map[string]int {
	n := map[string]int{}
	for _, f := range fs {
		n[f.EventType]++
	}
	return n
}

// A producer that mails one customer 30 times: serve sends the first 5
// (mail.recipient_limit), holds the other 25 (whatever the address's
// case), and an operator releases 10 of them and cancels the rest. Every
// mail is sent once or cancelled with its event; none is lost.
func TestRunawayProducerIsHeld(t *testing.T) {
	t.Parallel()
	mp := startMailpit(t)
	s := e2etest.NewStack(t, mp.SMTPAddr)
	fb := e2etest.NewFeedbackQueue(t, s.Names)
	pub := e2etest.NewPublisher(t, s.Names)
	_, err := s.CLI("migrate")
	require.NoError(t, err)
	p := s.Serve(map[string]string{"MAILSVC_MAIL_RECIPIENT_LIMIT": "5"})

	var evs []e2etest.OrderEvent
	for i := 1; i <= 30; i++ {
		ev := e2etest.Confirmed(i, "en")
		ev.Data["email"] = map[bool]string{true: "Runaway@Example.com", false: "runaway@example.com"}[i%2 == 0]
		evs = append(evs, ev)
	}
	pub.Publish(t, evs...)
	require.Equal(t, map[string]int{"EmailSent": 5}, countTypes(fb.Collect(t, 5, time.Minute)))
	var held string
	require.Eventually(t, func() bool {
		held, err = s.CLI("mail", "list", "--status", "held", "--limit", "100")
		return err == nil && strings.Count(held, "order-confirmed:") == 25
	}, 30*time.Second, 100*time.Millisecond, "held: %s", held)
	require.Contains(t, p.Metrics(t), `mailsvc_events_consumed_total{event_type="OrderConfirmed",outcome="held"} 25`)
	require.Equal(t, 5, mp.count(t))

	out, err := s.CLI("mail", "release", "--to", "RUNAWAY@example.com", "--limit", "10")
	require.NoError(t, err)
	require.Equal(t, "released 10 held mail(s)\n", out)
	require.Equal(t, map[string]int{"EmailSent": 10}, countTypes(fb.Collect(t, 10, time.Minute)))
	_, err = s.CLI("mail", "cancel-held")
	require.ErrorContains(t, err, "--to ADDRESS or --all")
	out, err = s.CLI("mail", "cancel-held", "--all")
	require.NoError(t, err)
	require.Equal(t, "cancelled 15 held mail(s)\n", out)
	require.Equal(t, map[string]int{"EmailCancelled": 15}, countTypes(fb.Collect(t, 15, time.Minute)))
	p.Stop(t, 30*time.Second)
	require.Equal(t, 15, mp.count(t), "each released mail arrives once, no cancelled one")
}
