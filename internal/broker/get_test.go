package broker_test

import (
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/mailtype"
)

func TestOriginalRoutingKeyPrecedence(t *testing.T) {
	t.Parallel()
	death := []any{amqp.Table{"reason": "delivery_limit", "queue": "q", "routing-keys": []any{"order.confirmed"}}}
	cases := []struct {
		name string
		h    map[string]any
		want string
	}{
		{"consumer header", map[string]any{mailtype.HeaderOriginalRoutingKey: "order.cancelled", "x-original-routing-key": "a", "x-death": death}, "order.cancelled"},
		{"legacy header", map[string]any{"x-original-routing-key": "order.cancelled", "x-death": death}, "order.cancelled"},
		{"x-death", map[string]any{"x-death": death}, "order.confirmed"},
		{"none", map[string]any{"x-death": []any{amqp.Table{"reason": "expired"}}}, ""},
		{"nil", nil, ""},
	}
	for _, c := range cases {
		require.Equal(t, c.want, broker.OriginalRoutingKey(c.h), c.name)
	}
	require.Equal(t, "delivery_limit", broker.DeadLetterReason(map[string]any{"x-death": death}))
	require.Equal(t, "too_large", broker.DeadLetterReason(map[string]any{mailtype.HeaderErrorReason: "too_large", "x-death": death}))
	require.Equal(t, "", broker.DeadLetterReason(nil))
}

func TestReplayHeadersDropDeadLetterBookkeeping(t *testing.T) {
	t.Parallel()
	h := map[string]any{
		"x-death": []any{}, "x-first-death-reason": "expired", "x-first-death-queue": "q", "x-last-death-reason": "expired",
		mailtype.HeaderErrorReason: "too_large", mailtype.HeaderError: "body too large", mailtype.HeaderOriginalRoutingKey: "order.confirmed",
		"traceparent": "00-abc", broker.HeaderReplays: int32(2),
	}
	out := broker.ReplayHeaders(h)
	require.Equal(t, map[string]any{"traceparent": "00-abc", broker.HeaderReplays: int64(3)}, out)
	require.Len(t, h, 9, "the input is not modified")
	require.Equal(t, map[string]any{broker.HeaderReplays: int64(1)}, broker.ReplayHeaders(nil))
}
