package deadletter_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/deadletter"
	"github.com/mailsvc/mailsvc/internal/mailtype"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestMessageKeepsTheDeliveryAndAddsTheReason(t *testing.T) {
	t.Parallel()
	d := broker.Delivery{Message: broker.Message{
		Exchange: "order.events", RoutingKey: "order.confirmed", MessageID: "", Type: "OrderConfirmed",
		ContentType: "application/json", Body: []byte(`{"x":1}`),
		Headers: map[string]any{"x-delivery-count": int64(2), "traceparent": "00-abc"},
	}, Redelivered: true}
	e := mailtype.NewError(mailtype.Permanent, mailtype.ReasonInvalidAddress, errors.New("bad address b@example.com"))
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))
	m := deadletter.Message(d, e, "mail.dlx", now)
	require.Equal(t, broker.Message{
		Exchange: "mail.dlx", RoutingKey: "order.confirmed", Type: "OrderConfirmed", ContentType: "application/json",
		Body: []byte(`{"x":1}`), Mandatory: true, Persistent: true,
		Headers: map[string]any{
			"traceparent":                       "00-abc",
			deadletter.HeaderErrorClass:         "permanent",
			deadletter.HeaderErrorReason:        "invalid_address",
			deadletter.HeaderError:              mailtype.Sanitize("bad address b@example.com"),
			deadletter.HeaderDeadLetteredAt:     "2026-01-02T02:04:05Z",
			deadletter.HeaderOriginalExchange:   "order.events",
			deadletter.HeaderOriginalRoutingKey: "order.confirmed",
			deadletter.HeaderRedelivered:        true,
		},
	}, m)
	require.NotContains(t, m.Headers[deadletter.HeaderError], "b@example.com")
	require.Len(t, d.Headers, 2, "the delivery is not modified")
	require.Equal(t, "order.confirmed", deadletter.OriginalRoutingKey(m.Headers))
	require.Equal(t, "invalid_address", deadletter.Reason(m.Headers))
}
