package e2e

import (
	"bytes"
	"fmt"
	"github.com/mailsvc/mailsvc/internal/e2etest"
	"net/mail"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
)

// TestCrashMidBatch is item 1 of the fault issue, by its recipe: 20 events,
// 2 workers, an SMTP server that answers 250 two seconds after DATA, a
// SIGKILL while two mails are recorded and two are on the wire, and a
// restart. Only the two on the wire follow the ambiguous policy: under
// unknown they end unknown with EmailUnknown, under retry they are
// delivered twice. Every other mail, including those the dead process had
// claimed but not handed over, is delivered exactly once and reported
// sent with attempts 1: no attempt spent, no EmailUnknown.
func TestCrashMidBatch(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{"unknown", "retry"} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			srv := smtptest.New(t, smtptest.Options{DataDelay: 2 * time.Second})
			s := e2etest.NewStack(t, srv.Addr)
			env := map[string]string{"MAILSVC_SENDER_WORKERS": "2", "MAILSVC_SENDER_AMBIGUOUS_POLICY": policy,
				"MAILSVC_SENDER_SEND_TIMEOUT": "4s", "MAILSVC_SENDER_LEASE": "14s", "MAILSVC_LOG_LEVEL": "warn"}
			fb := e2etest.NewFeedbackQueue(t, s.Names)
			p := s.Serve(env)
			pub := e2etest.NewPublisher(t, s.Names)
			const orders = 20
			for i := 1; i <= orders; i++ {
				pub.Publish(t, e2etest.Confirmed(i, "vi"))
			}
			sc := s.Schema
			require.Eventually(t, func() bool {
				return srv.Count() == 4 && sc.QueryInt(t, `SELECT count(*) FROM mail WHERE status = 'sent'`) == 2
			}, 30*time.Second, time.Millisecond, "two mails recorded and two on the wire")
			p.Kill()

			onWire := onTheWire(t, srv, sc.QueryMap(t, `SELECT dedupe_key, status FROM mail`))
			started := sc.QueryMap(t, `SELECT dedupe_key, status FROM mail WHERE send_started_at IS NOT NULL AND status = 'sending'`)
			held := sc.QueryInt(t, `SELECT count(*) FROM mail WHERE status = 'sending'`)
			require.Len(t, onWire, 2)
			require.Equal(t, onWire, sortedKeys(started), "the started sends are exactly those the server took")
			require.LessOrEqual(t, held, int64(2+8), "one process holds at most workers + min(batch_size, 4 × workers) rows")
			t.Logf("at the kill: %d rows held, on the wire %v", held, onWire)

			s.Serve(env)
			require.Eventually(t, func() bool {
				return sc.QueryInt(t, `SELECT count(*) FROM mail WHERE status IN ('sent', 'unknown')`) == orders
			}, 90*time.Second, 50*time.Millisecond, "every mail ends sent or unknown")
			events := fb.Collect(t, orders, time.Minute)

			perKey := deliveries(t, srv)
			status := sc.QueryMap(t, `SELECT dedupe_key, status FROM mail`)
			total := 0
			for i := 1; i <= orders; i++ {
				key := fmt.Sprintf("order-confirmed:%d", i)
				total += perKey[key]
				want, wantStatus := 1, "sent"
				if slices.Contains(onWire, key) {
					want, wantStatus = 2, "sent"
					if policy == "unknown" {
						want, wantStatus = 1, "unknown"
					}
				}
				require.Equal(t, want, perKey[key], key)
				require.Equal(t, wantStatus, status[key], key)
			}
			byType := map[string][]string{}
			for _, e := range events {
				byType[e.EventType] = append(byType[e.EventType], e.DedupeKey)
				if !slices.Contains(onWire, e.DedupeKey) {
					require.EqualValues(t, 1, e.Data["attempts"], "%s: a claim that never started spends no attempt", e.DedupeKey)
				}
			}
			if policy == "unknown" {
				sort.Strings(byType["EmailUnknown"])
				require.Equal(t, onWire, byType["EmailUnknown"], "EmailUnknown only for mails handed to the server")
				require.Len(t, byType["EmailSent"], orders-2)
			} else {
				require.Empty(t, byType["EmailUnknown"])
				require.Len(t, byType["EmailSent"], orders)
			}
			t.Logf("policy %s: deliveries %d for %d mails, duplicates per kill %d", policy, total, orders, total-orders)
		})
	}
}

// onTheWire returns, sorted, the dedupe keys the server took whose rows
// are not sent: mails handed over whose reply the killed process never saw.
func onTheWire(t *testing.T, srv *smtptest.Server, status map[string]string) []string {
	t.Helper()
	var out []string
	for key := range deliveries(t, srv) {
		if status[key] != "sent" {
			out = append(out, key)
		}
	}
	sort.Strings(out)
	return out
}

// deliveries counts the server's messages by X-Dedupe-Key.
func deliveries(t *testing.T, srv *smtptest.Server) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, m := range srv.Messages() {
		msg, err := mail.ReadMessage(bytes.NewReader(m.Data))
		require.NoError(t, err)
		out[msg.Header.Get("X-Dedupe-Key")]++
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
