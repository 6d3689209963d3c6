// Package projection keeps an order service's view of its customers' mails
// from mailsvc's feedback events (docs/contract.md, "Output"): per order,
// per mail (the event's dedupe_key), the mail's status. It is idempotent
// (an event_id seen before changes nothing) and does not depend on the
// arrival order of one mail's events: a status only replaces one of a lower
// rank (Rank), so a redelivered or requeued older event cannot undo a newer
// one.
package projection

import (
	"encoding/json"
	"fmt"
)

// Event is the part of a mail.events message the projection reads.
type Event struct {
	EventID   string `json:"event_id"`
	EventType string `json:"event_type"`
	DedupeKey string `json:"dedupe_key"`
	Data      struct {
		OrderID  json.RawMessage `json:"order_id"` // a JSON string, or an integer kept as sent
		Revision int             `json:"revision"`
		Template string          `json:"template"`
		Attempts int             `json:"attempts"`
		Provider string          `json:"provider"`
	} `json:"data"`
}

// Mail is the projection of one mail.
type Mail struct {
	Template      string `json:"template"`
	Revision      int    `json:"revision"`
	Status        string `json:"status"`
	Attempts      int    `json:"attempts"`
	Provider      string `json:"provider"`
	CancelTooLate bool   `json:"cancel_too_late"`
	Complained    bool   `json:"complained"`
	LastEventID   string `json:"last_event_id"`
}

// State is the whole projection plus the event ids already applied. A real
// order service keeps both in its database and writes them, with the
// event_id, in one transaction before it acks the message.
type State struct {
	Orders     map[string]map[string]*Mail `json:"orders"` // order_id -> dedupe_key -> mail
	Seen       map[string]bool             `json:"seen"`   // event_id -> applied
	Applied    int                         `json:"applied"`
	Duplicates int                         `json:"duplicates"`
}

// New returns an empty projection.
func New() *State {
	return &State{Orders: map[string]map[string]*Mail{}, Seen: map[string]bool{}}
}

// statusOf maps a feedback event type to the mail status it reports, and
// its rank. Delivery outcomes (sent, failed, cancelled, unknown) come once
// per mail, except that an unknown mail is settled later (sent or
// cancelled: rank 2 over unknown's 1). Provider reports follow EmailSent:
// delivered (3), then a bounce or a provider failure, the last word on
// delivery (4). EmailCancelTooLate and EmailComplained set a flag and keep
// the status. ok is false for an event type this version does not know: a
// consumer ignores it (a later mailsvc may add types).
func statusOf(eventType string) (status string, rank int, ok bool) {
	switch eventType {
	case "EmailUnknown":
		return "unknown", 1, true
	case "EmailSent":
		return "sent", 2, true
	case "EmailCancelled":
		return "cancelled", 2, true
	case "EmailDelivered":
		return "delivered", 3, true
	case "EmailFailed":
		return "failed", 4, true
	case "EmailBounced":
		return "bounced", 4, true
	case "EmailCancelTooLate", "EmailComplained":
		return "", 0, true
	}
	return "", 0, false
}

// Rank is a status's place in the order above; 0 for none.
func Rank(status string) int {
	for _, t := range []string{"EmailUnknown", "EmailSent", "EmailCancelled", "EmailDelivered", "EmailFailed", "EmailBounced"} {
		if s, r, _ := statusOf(t); s == status {
			return r
		}
	}
	return 0
}

// Apply adds one feedback event, given as the message body. It reports
// whether the event changed anything; a seen event_id or an unknown event
// type changes nothing. A body that is not an event is an error: dead-letter
// it rather than ack it.
func (s *State) Apply(body []byte) (bool, error) {
	var ev Event
	if err := json.Unmarshal(body, &ev); err != nil {
		return false, fmt.Errorf("not a feedback event: %w", err)
	}
	if ev.EventID == "" || ev.DedupeKey == "" || len(ev.Data.OrderID) == 0 {
		return false, fmt.Errorf("feedback event without event_id, dedupe_key or data.order_id")
	}
	if s.Seen[ev.EventID] {
		s.Duplicates++
		return false, nil
	}
	status, rank, known := statusOf(ev.EventType)
	s.Seen[ev.EventID] = true
	if !known {
		return false, nil
	}
	order := orderID(ev.Data.OrderID)
	if s.Orders[order] == nil {
		s.Orders[order] = map[string]*Mail{}
	}
	m := s.Orders[order][ev.DedupeKey]
	if m == nil {
		m = &Mail{}
		s.Orders[order][ev.DedupeKey] = m
	}
	m.Template, m.Revision = ev.Data.Template, ev.Data.Revision
	switch ev.EventType {
	case "EmailCancelTooLate":
		m.CancelTooLate = true
	case "EmailComplained":
		m.Complained = true
	}
	if status != "" && rank > Rank(m.Status) {
		m.Status, m.LastEventID = status, ev.EventID
		if ev.Data.Attempts > m.Attempts {
			m.Attempts = ev.Data.Attempts
		}
		if ev.Data.Provider != "" {
			m.Provider = ev.Data.Provider
		}
	}
	s.Applied++
	return true, nil
}

// orderID returns an order id as text: a JSON string unquoted, an integer
// digit for digit.
func orderID(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}
