package projection

import (
	"fmt"
	"testing"
)

func event(id, typ, key string, attempts int) []byte {
	return []byte(fmt.Sprintf(`{"event_id":%q,"event_type":%q,"dedupe_key":%q,"data":{"order_id":"42","revision":1,"template":"order_confirmed","attempts":%d,"provider":"smtp"}}`,
		id, typ, key, attempts))
}

func TestDuplicateEventChangesNothing(t *testing.T) {
	s := New()
	for range 3 {
		if _, err := s.Apply(event("e1", "EmailSent", "order-confirmed:42", 1)); err != nil {
			t.Fatal(err)
		}
	}
	if s.Applied != 1 || s.Duplicates != 2 {
		t.Fatalf("applied %d, duplicates %d; want 1 and 2", s.Applied, s.Duplicates)
	}
	if got := s.Orders["42"]["order-confirmed:42"].Status; got != "sent" {
		t.Fatalf("status %q, want sent", got)
	}
}

func TestOlderEventCannotUndoNewer(t *testing.T) {
	// An unknown mail settled sent, then delivered, then bounced: in any
	// arrival order the mail ends bounced.
	evs := [][]byte{
		event("e1", "EmailUnknown", "order-confirmed:42", 1),
		event("e2", "EmailSent", "order-confirmed:42", 1),
		event("e3", "EmailDelivered", "order-confirmed:42", 1),
		event("e4", "EmailBounced", "order-confirmed:42", 1),
		event("e5", "EmailCancelTooLate", "order-confirmed:42", 1),
	}
	for _, order := range [][]int{{0, 1, 2, 3, 4}, {4, 3, 2, 1, 0}, {1, 3, 0, 4, 2}} {
		s := New()
		for _, i := range order {
			if _, err := s.Apply(evs[i]); err != nil {
				t.Fatal(err)
			}
		}
		m := s.Orders["42"]["order-confirmed:42"]
		if m.Status != "bounced" || !m.CancelTooLate || m.LastEventID != "e4" {
			t.Fatalf("order %v: %+v; want bounced, cancel_too_late, last e4", order, *m)
		}
	}
}

func TestUnknownEventTypeIsIgnored(t *testing.T) {
	s := New()
	changed, err := s.Apply(event("e9", "EmailOpened", "order-confirmed:42", 1))
	if err != nil || changed || len(s.Orders) != 0 {
		t.Fatalf("changed %v, err %v, orders %v; want an ignored event", changed, err, s.Orders)
	}
}

func TestIntegerOrderIDIsKeptAsSent(t *testing.T) {
	s := New()
	_, err := s.Apply([]byte(`{"event_id":"e1","event_type":"EmailSent","dedupe_key":"order-confirmed:0042","data":{"order_id":42,"template":"order_confirmed"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Orders["42"]; !ok {
		t.Fatalf("orders %v; want order 42", s.Orders)
	}
}
