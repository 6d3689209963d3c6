package consumer_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/consumer"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/templates"
)

// A cancellation notice corrects a confirmation the customer holds: it
// goes in the order_cancelled template's lane, priority by default.
func TestNoticeTakesTheNoticeTemplatesLane(t *testing.T) {
	t.Parallel()
	reg, err := templates.New(templates.Options{})
	require.NoError(t, err)
	n := &consumer.Notices{Templates: reg, From: "Shop <orders@shop.example>", FromDomain: "shop.example",
		Now: func() time.Time { return testNow }}
	m, err := n.RenderNotice(store.NoticeSource{DedupeKey: "order-confirmed:42", OrderID: "42", Revision: 1, Locale: "vi",
		ToEmail: "b@example.com", Payload: body(t, data(confirmedEvent("42"))), ConfirmedAt: testNow})
	require.NoError(t, err)
	require.Equal(t, mailtype.CancelNoticeKey("42", 1), m.DedupeKey)
	require.Equal(t, mailtype.LanePriority, m.Lane)
}
