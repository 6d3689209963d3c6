package deadletter_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/deadletter"
)

func TestOriginalRoutingKeyPrecedence(t *testing.T) {
	t.Parallel()
	death := []any{map[string]any{"reason": "delivery_limit", "queue": "q", "routing-keys": []any{"order.confirmed"}}}
	cases := []struct {
		name string
		h    map[string]any
		want string
	}{
		{"consumer header", map[string]any{deadletter.HeaderOriginalRoutingKey: "order.cancelled", "x-original-routing-key": "a", "x-death": death}, "order.cancelled"},
		{"legacy header", map[string]any{"x-original-routing-key": "order.cancelled", "x-death": death}, "order.cancelled"},
		{"x-death", map[string]any{"x-death": death}, "order.confirmed"},
		{"none", map[string]any{"x-death": []any{map[string]any{"reason": "expired"}}}, ""},
		{"nil", nil, ""},
	}
	for _, c := range cases {
		require.Equal(t, c.want, deadletter.OriginalRoutingKey(c.h), c.name)
	}
	require.Equal(t, "delivery_limit", deadletter.Reason(map[string]any{"x-death": death}))
	require.Equal(t, "too_large", deadletter.Reason(map[string]any{deadletter.HeaderErrorReason: "too_large", "x-death": death}))
	require.Equal(t, "", deadletter.Reason(nil))
}

func TestReplayHeadersDropDeadLetterBookkeeping(t *testing.T) {
	t.Parallel()
	h := map[string]any{
		"x-death": []any{}, "x-first-death-reason": "expired", "x-first-death-queue": "q", "x-last-death-reason": "expired",
		deadletter.HeaderErrorReason: "too_large", deadletter.HeaderError: "body too large", deadletter.HeaderOriginalRoutingKey: "order.confirmed",
		"traceparent": "00-abc", deadletter.HeaderReplays: int32(2),
	}
	out := deadletter.ReplayHeaders(h)
	require.Equal(t, map[string]any{"traceparent": "00-abc", deadletter.HeaderReplays: int64(3)}, out)
	require.Len(t, h, 9, "the input is not modified")
	require.Equal(t, map[string]any{deadletter.HeaderReplays: int64(1)}, deadletter.ReplayHeaders(nil))
}
