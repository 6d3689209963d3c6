package broker_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker"
)

// HeaderCarrier reads text headers (a longstr arrives as a string, a byte
// array as []byte), reads anything else as "", and writes strings.
func TestHeaderCarrierReadsAndWritesTextHeaders(t *testing.T) {
	t.Parallel()
	h := map[string]any{"traceparent": "00-abc", "tracestate": []byte("v=1"), "x-count": int32(3), "x-table": map[string]any{"a": "b"}}
	c := broker.HeaderCarrier(h)
	require.Equal(t, "00-abc", c.Get("traceparent"))
	require.Equal(t, "v=1", c.Get("tracestate"))
	require.Empty(t, c.Get("x-count"))
	require.Empty(t, c.Get("x-table"))
	require.Empty(t, c.Get("missing"))
	require.ElementsMatch(t, []string{"traceparent", "tracestate", "x-count", "x-table"}, c.Keys())
	c.Set("traceparent", "00-def")
	require.Equal(t, "00-def", h["traceparent"], "writes into the message's own headers")
	var none broker.HeaderCarrier
	none.Set("traceparent", "x") // a nil map: nothing, no panic
	require.Empty(t, none.Get("traceparent"))
	require.Empty(t, none.Keys())
}
