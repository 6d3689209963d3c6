package deadletter

import "strings"

// OriginalRoutingKey returns the routing key a dead-lettered message was
// first published with: the consumer's HeaderOriginalRoutingKey header,
// else LegacyOriginalRoutingKeyHeader, else the first routing key of the
// newest x-death entry (what RabbitMQ records when it dead-letters by
// itself), else "". h is a message's headers as broker gives them.
func OriginalRoutingKey(h map[string]any) string {
	for _, k := range []string{HeaderOriginalRoutingKey, LegacyOriginalRoutingKeyHeader} {
		if s, ok := h[k].(string); ok && s != "" {
			return s
		}
	}
	deaths, _ := h["x-death"].([]any)
	for _, d := range deaths {
		entry, ok := d.(map[string]any)
		if !ok {
			continue
		}
		keys, _ := entry["routing-keys"].([]any)
		for _, k := range keys {
			if s, ok := k.(string); ok && s != "" {
				return s
			}
		}
	}
	return ""
}

// Reason returns why a message was dead-lettered: the consumer's
// HeaderErrorReason, else the reason of the newest x-death entry (e.g.
// "delivery_limit", "rejected", "expired"), else "".
func Reason(h map[string]any) string {
	if s, ok := h[HeaderErrorReason].(string); ok && s != "" {
		return s
	}
	deaths, _ := h["x-death"].([]any)
	if len(deaths) > 0 {
		if entry, ok := deaths[0].(map[string]any); ok {
			if s, ok := entry["reason"].(string); ok {
				return s
			}
		}
	}
	return ""
}

// ReplayHeaders returns the headers a replayed message is published with:
// h without the dead-letter bookkeeping (x-death and the x-first-death-* /
// x-last-death-* headers, which RabbitMQ would otherwise use to detect a
// dead-letter cycle and drop the message, and the consumer's x-mailsvc-*
// error headers, set afresh if it dead-letters the message again), with
// HeaderReplays incremented. h is not modified.
func ReplayHeaders(h map[string]any) map[string]any {
	out := make(map[string]any, len(h)+1)
	for k, v := range h {
		if k == "x-death" || strings.HasPrefix(k, "x-first-death-") || strings.HasPrefix(k, "x-last-death-") ||
			(strings.HasPrefix(k, "x-mailsvc-") && k != HeaderReplays) {
			continue
		}
		out[k] = v
	}
	out[HeaderReplays] = replays(h[HeaderReplays]) + 1
	return out
}

func replays(v any) int64 {
	switch n := v.(type) {
	case int64:
		return n
	case int32:
		return int64(n)
	case int:
		return int64(n)
	case int16:
		return int64(n)
	case int8:
		return int64(n)
	case uint8:
		return int64(n)
	}
	return 0
}
