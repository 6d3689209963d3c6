package store

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// AuditActions are the actions the audit log names (AuditEntry.Action,
// AuditQuery.Action): the operator's actions, in the order a help text
// lists them. internal/operator's Action constants are these names.
var AuditActions = []string{"resend", "reconcile", "provider-resume", "suppression-add", "suppression-remove",
	"dlq-replay", "dlq-skip", "outbox-republish"}

// checkQueryText returns an error wrapping ErrBadQuery, naming field, when a
// text filter cannot be sent to PostgreSQL: it is not valid UTF-8 or it
// holds a NUL byte. Such a value can match no row, and the database would
// refuse it as an encoding error, which is the input's fault, not the
// database's.
func checkQueryText(field, v string) error {
	switch {
	case !utf8.ValidString(v):
		return fmt.Errorf("%w: %s: not valid UTF-8: %q", ErrBadQuery, field, v)
	case strings.IndexByte(v, 0) >= 0:
		return fmt.Errorf("%w: %s: contains a NUL byte: %q", ErrBadQuery, field, v)
	}
	return nil
}

// checkQueryTexts is checkQueryText of each field-value pair, the first error.
func checkQueryTexts(fieldValues ...string) error {
	for i := 0; i+1 < len(fieldValues); i += 2 {
		if err := checkQueryText(fieldValues[i], fieldValues[i+1]); err != nil {
			return err
		}
	}
	return nil
}

// checkOrderID is checkQueryText of an order id that must not be blank.
func checkOrderID(id string) error {
	if err := checkQueryText("order_id", id); err != nil {
		return err
	}
	if strings.TrimSpace(id) == "" {
		return fmt.Errorf("%w: order_id: empty", ErrBadQuery)
	}
	return nil
}
