package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// TestMail is a pending mail row for tests and benchmarks of the sender,
// which must not depend on the consumer's insert path. Zero fields get
// defaults (see InsertPendingForTest).
type TestMail struct {
	DedupeKey    string
	OrderID      string
	Template     string
	Locale       string
	ToEmail      string
	CustomerName string
	Subject      string
	BodyText     string
	BodyHTML     string
	MessageID    string
	// SendAfter is when the row becomes due; zero means now.
	SendAfter time.Time
}

const insertTestMailSQL = `
INSERT INTO mail (event_id, dedupe_key, order_id, template, locale, to_email, payload,
    subject, body_text, body_html, message_id, status, send_after, occurred_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, 'pending', COALESCE($12, now()), now())
RETURNING id`

// InsertPendingForTest inserts one `pending` mail row and returns its id.
// Defaults: OrderID "1", DedupeKey "order-confirmed:"+OrderID, Template
// "order_confirmed", Locale "vi", ToEmail "customer@example.com", a
// Vietnamese subject and bodies, MessageID derived from the dedupe key.
// For tests only: production rows are written by the consumer.
func (s *Store) InsertPendingForTest(ctx context.Context, m TestMail) (int64, error) {
	m = m.withDefaults()
	payload, err := json.Marshal(map[string]any{"customer_name": m.CustomerName, "order_id": m.OrderID})
	if err != nil {
		return 0, err
	}
	var sendAfter *time.Time
	if !m.SendAfter.IsZero() {
		sendAfter = &m.SendAfter
	}
	var id int64
	err = s.pool.QueryRow(ctx, insertTestMailSQL, uuid.New(), m.DedupeKey, m.OrderID, m.Template, m.Locale,
		m.ToEmail, string(payload), m.Subject, m.BodyText, m.BodyHTML, m.MessageID, sendAfter).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("insert test mail %s: %w", m.DedupeKey, interpretError(err))
	}
	return id, nil
}

func (m TestMail) withDefaults() TestMail {
	if m.OrderID == "" {
		m.OrderID = "1"
	}
	if m.DedupeKey == "" {
		m.DedupeKey = mailtype.ConfirmationKey(m.OrderID)
	}
	if m.Template == "" {
		m.Template = "order_confirmed"
	}
	if m.Locale == "" {
		m.Locale = "vi"
	}
	if m.ToEmail == "" {
		m.ToEmail = "customer@example.com"
	}
	if m.CustomerName == "" {
		m.CustomerName = "Nguyễn Văn B"
	}
	if m.Subject == "" {
		m.Subject = "Xác nhận đơn hàng " + m.OrderID
	}
	if m.BodyText == "" {
		m.BodyText = "Cảm ơn quý khách đã đặt hàng. Đơn hàng " + m.OrderID + " đã được xác nhận.\n"
	}
	if m.BodyHTML == "" {
		m.BodyHTML = "<p>Cảm ơn quý khách đã đặt hàng. Đơn hàng " + m.OrderID + " đã được xác nhận.</p>"
	}
	if m.MessageID == "" {
		m.MessageID = mailtype.MessageID(m.DedupeKey, "example.com")
	}
	return m
}

const seedPendingSQL = `
INSERT INTO mail (event_id, dedupe_key, order_id, template, locale, to_email, payload,
    subject, body_text, body_html, message_id, status, attempts, send_after, sent_at, occurred_at)
SELECT gen_random_uuid(), $1 || g, g::text, 'order_confirmed', 'vi', 'customer' || g || '@example.com',
    jsonb_build_object('customer_name', 'Nguyễn Văn B'),
    'Xác nhận đơn hàng ' || g, 'Cảm ơn quý khách. Đơn hàng ' || g || E' đã được xác nhận.\n',
    '<p>Cảm ơn quý khách. Đơn hàng ' || g || ' đã được xác nhận.</p>',
    '<' || md5($1 || g) || '@example.com>', $2,
    CASE WHEN $2 = 'pending' THEN 0 ELSE 1 END, now() - interval '1 minute',
    CASE WHEN $2 = 'sent' THEN now() END, now()
FROM generate_series(1, $3::int) g`

// SeedForTest inserts n rows with status pending or sent in one statement,
// keyed keyPrefix+1 .. keyPrefix+n, for benchmarks that need many rows
// (a million sent rows beside the work queue). For tests only.
func (s *Store) SeedForTest(ctx context.Context, keyPrefix string, status mailtype.Status, n int) error {
	if status != mailtype.StatusPending && status != mailtype.StatusSent {
		return fmt.Errorf("seed mails: status %s not supported", status)
	}
	if _, err := s.pool.Exec(ctx, seedPendingSQL, keyPrefix, string(status), n); err != nil {
		return fmt.Errorf("seed %d %s mails: %w", n, status, interpretError(err))
	}
	return nil
}
