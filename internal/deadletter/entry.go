package deadletter

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/mailsvc/mailsvc/internal/broker"
)

// Entry is one dead-lettered message as `mailsvc dlq list` and `dlq show`
// show it.
type Entry struct {
	// Position is its place in the queue when it was read, from 1.
	Position int `json:"position"`
	// ID names the message for `dlq show` and `dlq skip`: EntryID of it.
	ID        string `json:"id"`
	MessageID string `json:"message_id"`
	Type      string `json:"type,omitempty"`
	// RoutingKey is OriginalRoutingKey, Reason is Reason; Error is the
	// consumer's sanitized error text (HeaderError), "" when none.
	RoutingKey string `json:"routing_key"`
	Reason     string `json:"reason"`
	Error      string `json:"error,omitempty"`
	// DeadLetteredAt is when it was last dead-lettered (HeaderDeadLetteredAt,
	// else the newest x-death time), zero when unknown.
	DeadLetteredAt time.Time `json:"dead_lettered_at"`
	// Deaths is the count of its x-death entries (how often RabbitMQ
	// dead-lettered it by itself); Replays how often a replay sent it back
	// (HeaderReplays). Failures = Replays + 1 for a message the consumer
	// dead-lettered.
	Deaths  int64 `json:"deaths"`
	Replays int64 `json:"replays"`
	// Headers and Body are the message's as stored in the queue.
	Headers map[string]any `json:"headers"`
	Body    []byte         `json:"body"`
}

// Age is how long ago it was dead-lettered, 0 when unknown.
func (e Entry) Age(now time.Time) time.Duration {
	if e.DeadLetteredAt.IsZero() {
		return 0
	}
	return now.Sub(e.DeadLetteredAt)
}

// EntryID is the stable name of a dead-lettered message: "dl-" and the
// first 12 hex digits of the SHA-256 of its message_id, its body and when
// it was dead-lettered. It does not change while the message waits in the
// queue, however often it is browsed (the broker's delivery count is not
// part of it); two messages share it only if they are the same message
// dead-lettered at the same instant.
func EntryID(m broker.Message) string {
	h := sha256.New()
	fmt.Fprintf(h, "%d:%s\x00%d:", len(m.MessageID), m.MessageID, len(m.Body))
	h.Write(m.Body)
	fmt.Fprintf(h, "\x00%s", deadLetteredAt(m.Headers).UTC().Format(time.RFC3339Nano))
	return "dl-" + hex.EncodeToString(h.Sum(nil))[:12]
}

// NewEntry reads the Entry of a message at position.
func NewEntry(position int, m broker.Message) Entry {
	e := Entry{Position: position, ID: EntryID(m), MessageID: m.MessageID, Type: m.Type,
		RoutingKey: OriginalRoutingKey(m.Headers), Reason: Reason(m.Headers), DeadLetteredAt: deadLetteredAt(m.Headers),
		Replays: replays(m.Headers[HeaderReplays]), Headers: m.Headers, Body: m.Body}
	e.Error, _ = m.Headers[HeaderError].(string)
	deaths, _ := m.Headers["x-death"].([]any)
	for _, d := range deaths {
		if entry, ok := d.(map[string]any); ok {
			e.Deaths += replays(entry["count"])
		}
	}
	return e
}

// deadLetteredAt is HeaderDeadLetteredAt, else the time of the newest
// x-death entry, else zero.
func deadLetteredAt(h map[string]any) time.Time {
	if s, ok := h[HeaderDeadLetteredAt].(string); ok {
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			return t
		}
	}
	if deaths, _ := h["x-death"].([]any); len(deaths) > 0 {
		if entry, ok := deaths[0].(map[string]any); ok {
			if t, ok := entry["time"].(time.Time); ok {
				return t
			}
		}
	}
	return time.Time{}
}

// Filter selects dead-lettered messages; its zero value selects all.
type Filter struct {
	// Reason and RoutingKey must equal the message's (Reason,
	// OriginalRoutingKey) when set.
	Reason, RoutingKey string
	// OlderThan, when positive, takes messages dead-lettered longer ago
	// than it (a message whose time is unknown is taken).
	OlderThan time.Duration
}

// Empty reports whether f selects every message.
func (f Filter) Empty() bool { return f == Filter{} }

// Match reports whether f selects e, judged at now.
func (f Filter) Match(e Entry, now time.Time) bool {
	return (f.Reason == "" || e.Reason == f.Reason) && (f.RoutingKey == "" || e.RoutingKey == f.RoutingKey) &&
		(f.OlderThan <= 0 || e.DeadLetteredAt.IsZero() || e.Age(now) > f.OlderThan)
}

// String is f as the audit log and the summaries name it ("" for none).
func (f Filter) String() string {
	var parts []string
	if f.Reason != "" {
		parts = append(parts, "reason="+f.Reason)
	}
	if f.RoutingKey != "" {
		parts = append(parts, "routing_key="+f.RoutingKey)
	}
	if f.OlderThan > 0 {
		parts = append(parts, "older_than="+f.OlderThan.String())
	}
	return strings.Join(parts, " ")
}
