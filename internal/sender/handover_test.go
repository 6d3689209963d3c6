package sender_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/sender"
	"github.com/mailsvc/mailsvc/internal/sender/smtptest"
	"github.com/mailsvc/mailsvc/internal/store"
)

// newMail is an OrderConfirmed's mail as the consumer writes it.
func newMail(orderID string) store.IngestItem {
	return store.IngestItem{Mail: &store.NewMail{EventID: uuid.NewString(), DedupeKey: key(orderID), OrderID: orderID,
		Template: "order_confirmed", Locale: "vi", ToEmail: "customer@example.com", Payload: []byte(`{}`),
		Subject: "Đơn hàng " + orderID, BodyText: "t", BodyHTML: "<p>t</p>", MessageID: "<" + orderID + "@example.com>",
		From: from, ToName: "Khách", IdempotencyKey: "ns/" + orderID, OccurredAt: time.Now()}}
}

// TestHandedOverRowsAreSentWithoutAClaim: while the dispatcher waits for
// work, the mails the consumer's insert writes are leased to the pool by
// the insert and sent with no claim: each once, one attempt, its EmailSent
// written; the claim counter moves only for the mails written before the
// dispatcher waited (woken, as the consumer wakes it, and claimed).
func TestHandedOverRowsAreSentWithoutAClaim(t *testing.T) {
	t.Parallel()
	b := setup(t, smtptest.Options{})
	cfg := testConfig()
	cfg.PollInterval = time.Hour // no claim but the first and those a wake-up asks for
	p, m := b.start(t, cfg, sender.Deps{})
	h := p.Handover(b.sc.Store)
	ctx := context.Background()

	// Until the dispatcher waits for work: a mail written before that is
	// pending, woken and claimed (as the consumer wakes the pool), and
	// the next one is written only once it was sent, so that no due row
	// stops the next insert from leasing.
	claimedBefore, n := 0, 0
	sentNow := func() int64 {
		return b.count(t, `SELECT count(*) FROM mail WHERE status = 'sent' AND attempts = 1 AND sends = 1`)
	}
	for leased := false; !leased; {
		require.Less(t, n, 50, "the dispatcher never waited for work")
		n++
		res, err := h.Ingest(ctx, []store.IngestItem{newMail(fmt.Sprintf("w%d", n))})
		require.NoError(t, err)
		if leased = res[0].Leased; !leased {
			claimedBefore++
			p.Wake()
		}
		require.Eventually(t, func() bool { return sentNow() == int64(n) }, 15*time.Second, 5*time.Millisecond)
	}

	const batches = 5
	sent := func(want int64) {
		t.Helper()
		require.Eventually(t, func() bool { return sentNow() == want }, 15*time.Second, 5*time.Millisecond)
	}
	for i := range batches {
		items := []store.IngestItem{newMail("h" + string(rune('a'+i))), newMail("h" + string(rune('a'+i)) + "x")}
		res, err := h.Ingest(ctx, append(items, items[0])) // and a redelivery in the batch
		require.NoError(t, err)
		require.Equal(t, []bool{true, true, false}, []bool{res[0].Leased, res[1].Leased, res[2].Leased})
		require.Equal(t, mailtype.DispositionDuplicate, res[2].Disposition)
		sent(int64(n + 2*(i+1))) // each batch within what the pool may hold (holdBounds)
	}
	total := int64(n + 2*batches)
	require.EqualValues(t, total, b.events(t, mailtype.EmailSent))
	require.EqualValues(t, total, len(b.srv.Messages()))
	require.EqualValues(t, 1+2*batches, value(m.HandedOver.WithLabelValues("bulk")))
	require.EqualValues(t, claimedBefore, value(m.Claimed.WithLabelValues("bulk")))
}
