// Package e2e drives mailsvc only through its public surfaces: events go in
// through an independent AMQP publisher, mails are read back from Mailpit's
// HTTP API (a real SMTP server we did not write), feedback events from a
// queue bound to mail.events, and state from `mailsvc mail show --json`.
package e2e

import (
	"encoding/json"
	"fmt"
	"github.com/mailsvc/mailsvc/internal/e2etest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// mailState is the part of `mailsvc mail show --json` the tests read.
type mailState struct {
	DedupeKey string `json:"dedupe_key"`
	EventID   string `json:"event_id"`
	Status    string `json:"status"`
	Attempts  int    `json:"attempts"`
	Feedback  []struct {
		EventType string `json:"event_type"`
	} `json:"feedback"`
}

func show(t testing.TB, s *e2etest.Stack, key string) mailState {
	t.Helper()
	out, err := s.CLI("mail", "show", key, "--json")
	require.NoError(t, err)
	var m mailState
	require.NoError(t, json.Unmarshal([]byte(out), &m))
	return m
}

func waitStatus(t testing.TB, s *e2etest.Stack, key, status string) mailState {
	t.Helper()
	var m mailState
	var lastErr error
	require.Eventually(t, func() bool {
		out, err := s.CLI("mail", "show", key, "--json")
		if err != nil {
			lastErr = err
			return false
		}
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			lastErr = fmt.Errorf("decode %q: %w", out, err)
			return false
		}
		return m.Status == status
	}, time.Minute, 100*time.Millisecond, "mail %s never reached %s (last %+v, error %v)", key, status, m, lastErr)
	return m
}

func TestEndToEnd(t *testing.T) {
	t.Parallel()
	mp := startMailpit(t)
	s := e2etest.NewStack(t, mp.SMTPAddr)
	fb := e2etest.NewFeedbackQueue(t, s.Names)
	pub := e2etest.NewPublisher(t, s.Names)
	_, err := s.CLI("migrate")
	require.NoError(t, err)
	p := s.Serve(nil)

	const orders = 200
	var evs []e2etest.OrderEvent
	for i := 1; i <= orders; i++ {
		evs = append(evs, e2etest.Confirmed(i, map[bool]string{true: "vi", false: "en"}[i%2 == 1]))
	}
	pub.Publish(t, evs...)
	// Redeliveries (same event_id) and same-intent events (new event_id,
	// same dedupe_key) must create nothing.
	pub.Publish(t, evs[:10]...)
	for _, ev := range evs[10:20] {
		again := ev
		again.EventID = e2etest.NewID()
		pub.Publish(t, again)
	}
	// Cancel before confirm: a tombstone, and the later confirm sends nothing.
	for i := orders + 1; i <= orders+5; i++ {
		pub.Publish(t, e2etest.Cancelled(i))
		waitStatus(t, s, fmt.Sprintf("order-confirmed:%d", i), "cancelled")
		pub.Publish(t, e2etest.Confirmed(i, "vi"))
	}
	// Cancel after sent: too late, and the customer gets a cancellation
	// notice (its own EmailSent).
	waitStatus(t, s, "order-confirmed:1", "sent")
	pub.Publish(t, e2etest.Cancelled(1))

	got := fb.Collect(t, orders+5+1+1, 2*time.Minute)
	require.Eventually(t, func() bool { return mp.count(t) >= orders+1 }, time.Minute, 100*time.Millisecond)

	checkFeedback(t, got, orders)
	checkMails(t, mp, orders)
	for i := orders + 1; i <= orders+5; i++ {
		m := show(t, s, fmt.Sprintf("order-confirmed:%d", i))
		require.Equal(t, "cancelled", m.Status)
		require.Empty(t, m.EventID, "a tombstone has no event_id")
	}
	m := show(t, s, "order-confirmed:1")
	require.Equal(t, "sent", m.Status)
	require.Equal(t, 1, m.Attempts)

	metrics := p.Metrics(t)
	require.Contains(t, metrics, `mailsvc_events_consumed_total{event_type="OrderConfirmed",outcome="inserted"} 200`)
	require.Contains(t, metrics, `mailsvc_events_consumed_total{event_type="OrderConfirmed",outcome="duplicate"} 25`)
	p.Stop(t, 30*time.Second)
	require.Equal(t, orders+1, mp.count(t), "no mail may arrive twice or for a cancelled order; one notice")
}

// checkFeedback: one EmailSent per order with message_id = event_id, one
// EmailCancelled per tombstone, one EmailCancelTooLate.
func checkFeedback(t *testing.T, got []e2etest.Feedback, orders int) {
	t.Helper()
	byType := map[string]map[string]int{}
	for _, f := range got {
		require.Equal(t, f.EventID, f.MessageID, "message_id must equal event_id")
		if byType[f.EventType] == nil {
			byType[f.EventType] = map[string]int{}
		}
		byType[f.EventType][f.DedupeKey]++
	}
	require.Len(t, byType["EmailSent"], orders+1)
	for key, n := range byType["EmailSent"] {
		require.Equal(t, 1, n, "EmailSent for %s", key)
	}
	require.Equal(t, 1, byType["EmailSent"]["order-cancelled:1"], "the cancellation notice")
	require.Len(t, byType["EmailCancelled"], 5)
	require.Equal(t, map[string]int{"order-confirmed:1": 1}, byType["EmailCancelTooLate"])
	require.Len(t, byType["EmailFailed"], 0)
}

// checkMails: one mail per order, to the right recipient, with the right
// subject, locale and total.
func checkMails(t *testing.T, mp *mailpit, orders int) {
	t.Helper()
	msgs := mp.messages(t)
	require.Len(t, msgs, orders+1)
	seen := map[string]bool{}
	notices := 0
	for _, sm := range msgs {
		require.Len(t, sm.To, 1)
		if sm.Subject == "Đơn hàng #1 đã bị hủy" {
			notices++
			require.Equal(t, "customer1@example.com", sm.To[0].Address, "to the confirmation's address")
			require.Contains(t, mp.message(t, sm.ID).Text, "1.250.000 ₫", "the total as confirmed")
			continue
		}
		var id int
		_, err := fmt.Sscanf(sm.To[0].Address, "customer%d@example.com", &id)
		require.NoError(t, err, sm.To[0].Address)
		require.False(t, seen[sm.To[0].Address], "two mails to %s", sm.To[0].Address)
		seen[sm.To[0].Address] = true
		full := mp.message(t, sm.ID)
		if id%2 == 1 {
			require.Equal(t, fmt.Sprintf("Xác nhận đơn hàng #%d", id), sm.Subject)
			require.Contains(t, full.Text, "1.250.000 ₫")
			require.Equal(t, "Nguyễn Văn B", sm.To[0].Name)
		} else {
			require.Equal(t, fmt.Sprintf("Your order #%d is confirmed", id), sm.Subject)
			require.Contains(t, full.Text, "$25.50")
		}
		require.True(t, strings.Contains(full.HTML, "<table"), "HTML part present")
	}
	require.Len(t, seen, orders)
	require.Equal(t, 1, notices)
}
