package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
)

// Mail is a pending mail row for tests and benchmarks of the sender,
// which must not depend on the consumer's insert path. Zero fields get
// defaults (see InsertPending).
type Mail struct {
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
	// From, ToName, ReplyTo and IdempotencyKey are the stored envelope;
	// From "" writes a row as before migration 00050 (its sender fills
	// them from its config).
	From, ToName, ReplyTo, IdempotencyKey string
	// SendAfter is when the row becomes due; zero means now.
	SendAfter time.Time
}

const insertTestMailSQL = `
INSERT INTO mail (event_id, dedupe_key, order_id, template, locale, to_email, payload,
    subject, body_text, body_html, message_id, status, send_after, occurred_at,
    from_addr, to_name, reply_to, idempotency_key)
VALUES ($1, $2, $3, $4, $5, $6, $7::text::jsonb, $8, $9, $10, $11, 'pending', COALESCE($12, now()), now(),
    $13, $14, $15, $16)
RETURNING id`

// InsertPending inserts one `pending` mail row into st and returns its id.
// Defaults: OrderID "1", DedupeKey "order-confirmed:"+OrderID, Template
// "order_confirmed", Locale "vi", ToEmail "customer@example.com", a
// Vietnamese subject and bodies, MessageID derived from the dedupe key.
// Production rows are written by the consumer.
func InsertPending(ctx context.Context, st *store.Store, m Mail) (int64, error) {
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
	err = st.TestSupport().Pool.QueryRow(ctx, insertTestMailSQL, uuid.New(), m.DedupeKey, m.OrderID, m.Template, m.Locale,
		m.ToEmail, string(payload), m.Subject, m.BodyText, m.BodyHTML, m.MessageID, sendAfter,
		m.From, m.ToName, m.ReplyTo, m.IdempotencyKey).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("insert test mail %s: %w", m.DedupeKey, err)
	}
	return id, nil
}

func (m Mail) withDefaults() Mail {
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

// Seed inserts n rows into st with status pending or sent in one
// statement, keyed keyPrefix+1 .. keyPrefix+n, for benchmarks that need
// many rows (a million sent rows beside the work queue).
func Seed(ctx context.Context, st *store.Store, keyPrefix string, status mailtype.Status, n int) error {
	if status != mailtype.StatusPending && status != mailtype.StatusSent {
		return fmt.Errorf("seed mails: status %s not supported", status)
	}
	if _, err := st.TestSupport().Pool.Exec(ctx, seedPendingSQL, keyPrefix, string(status), n); err != nil {
		return fmt.Errorf("seed %d %s mails: %w", n, status, err)
	}
	return nil
}
