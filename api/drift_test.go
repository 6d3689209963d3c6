package api_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/api"
	"github.com/mailsvc/mailsvc/internal/consumer"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/templates"
)

var now = time.Date(2026, 9, 18, 8, 0, 0, 0, time.UTC)

// newDecider is the consumer's Decider with the defaults `mailsvc event
// validate` uses without a config file.
func newDecider(t *testing.T) *consumer.Decider {
	t.Helper()
	reg, err := templates.New(templates.Options{})
	require.NoError(t, err)
	c := consumer.Config{}.WithDefaults()
	return &consumer.Decider{MaxBytes: c.MaxMessageBytes, MaxEventAge: c.MaxEventAge, Templates: reg,
		Attachments: consumer.AttachmentRules{Enabled: true}, Now: func() time.Time { return now }}
}

func consumerMessage(body []byte, messageID string) consumer.Message {
	return consumer.Message{Body: body, MessageID: messageID}
}

// verdict is what a case expects of the schema and of the consumer.
type verdict int

const (
	// valid: the schema accepts, the consumer records.
	valid verdict = iota
	// invalid: the schema refuses, the consumer dead-letters.
	invalid
	// consumerOnly: a rule no JSON Schema can state (cross-field, bytes,
	// code lists, the JSON text itself): the schema accepts, the consumer
	// dead-letters.
	consumerOnly
	// ignored: not an event of the contract: the schema refuses, the
	// consumer acknowledges and drops it.
	ignored
)

const eventID = "0192f4c4-8d3e-7b4a-9c1d-2e5f6a7b8c9d"

// confirmed is a valid OrderConfirmed of order 42 as a JSON-ready map.
func confirmed() map[string]any {
	return map[string]any{
		"event_id": eventID, "event_type": "OrderConfirmed", "version": 1,
		"occurred_at": "2026-09-18T07:59:00Z", "dedupe_key": "order-confirmed:42",
		"data": map[string]any{
			"order_id": "42", "email": "b@example.com", "customer_name": "Nguyễn Văn B", "locale": "vi",
			"currency": "VND", "total": "1400000",
			"items": []any{
				map[string]any{"sku": "SKU-1", "name": "Áo thun", "quantity": 2, "unit_price": "625000"},
				map[string]any{"sku": "SKU-2", "name": "Nón lá", "quantity": 1, "unit_price": "150000"},
			},
		},
	}
}

// cancelled is a valid OrderCancelled of order 42.
func cancelled() map[string]any {
	return map[string]any{
		"event_id": eventID, "event_type": "OrderCancelled", "version": 1,
		"occurred_at": "2026-09-18T07:59:00Z", "dedupe_key": "order-cancelled:42",
		"data": map[string]any{"order_id": "42", "reason": "customer_request"},
	}
}

func data(ev map[string]any) map[string]any { return ev["data"].(map[string]any) }

// withInvoice is confirmed with one attachment.
func withInvoice() map[string]any {
	ev := confirmed()
	data(ev)["attachments"] = []any{map[string]any{
		"file_name": "Hóa đơn 42.pdf", "content_type": "application/pdf",
		"url":    "https://invoices.example.com/42.pdf?X-Amz-Signature=abc",
		"sha256": strings.Repeat("ab", 32), "size": 48213, "optional": false,
	}}
	return ev
}

func attachment(ev map[string]any) map[string]any {
	return data(ev)["attachments"].([]any)[0].(map[string]any)
}

func item(ev map[string]any, i int) map[string]any {
	return data(ev)["items"].([]any)[i].(map[string]any)
}

// driftCase is one input example.
type driftCase struct {
	name string
	// base builds the event; change edits it.
	base   func() map[string]any
	change func(ev map[string]any)
	// raw, when set, is the body instead.
	raw       string
	messageID string
	want      verdict
	// reason is the consumer's dead-letter reason (not for valid, ignored).
	reason mailtype.Reason
}

// driftCases: the revision cases need the consumer's revision rule
// (data.revision, an integer >= 1, absent meaning 1; dedupe_key
// order-confirmed:{order_id}:r{n} for n > 1).
var driftCases = []driftCase{
	{name: "confirmed", base: confirmed, want: valid},
	{name: "confirmed, integer order_id", base: confirmed, change: func(ev map[string]any) { data(ev)["order_id"] = 42 }, want: valid},
	{name: "confirmed, unknown fields are allowed", base: confirmed, change: func(ev map[string]any) {
		ev["producer"] = "orders-v3"
		data(ev)["shipping"] = map[string]any{"method": "express"}
		item(ev, 0)["color"] = "red"
	}, want: valid},
	{name: "confirmed, optional fields absent or null", base: confirmed, change: func(ev map[string]any) {
		delete(data(ev), "total")
		delete(data(ev), "locale")
		data(ev)["customer_name"] = nil
		delete(item(ev, 0), "sku")
	}, want: valid},
	{name: "confirmed, revision 1 keeps the first key", base: confirmed, change: func(ev map[string]any) { data(ev)["revision"] = 1 }, want: valid},
	{name: "confirmed, revision 2 with its key", base: confirmed, change: func(ev map[string]any) {
		data(ev)["revision"] = 2
		ev["dedupe_key"] = "order-confirmed:42:r2"
	}, want: valid},
	{name: "cancelled", base: cancelled, want: valid},
	{name: "cancelled without dedupe_key, integer order_id", base: cancelled, change: func(ev map[string]any) {
		delete(ev, "dedupe_key")
		data(ev)["order_id"] = 42
	}, want: valid},
	{name: "cancelled, revision 3", base: cancelled, change: func(ev map[string]any) { data(ev)["revision"] = 3 }, want: valid},

	{name: "not JSON", raw: `{"event_id": `, want: invalid, reason: mailtype.ReasonMalformedJSON},
	{name: "data is not an object", base: confirmed, change: func(ev map[string]any) { ev["data"] = "42" }, want: invalid, reason: mailtype.ReasonMalformedJSON},
	{name: "missing event_id", base: confirmed, change: func(ev map[string]any) { delete(ev, "event_id") }, want: invalid, reason: mailtype.ReasonMissingField},
	{name: "event_id not a UUID", base: confirmed, change: func(ev map[string]any) { ev["event_id"] = "evt-42" }, want: invalid, reason: mailtype.ReasonInvalidField},
	{name: "missing occurred_at", base: cancelled, change: func(ev map[string]any) { delete(ev, "occurred_at") }, want: invalid, reason: mailtype.ReasonMissingField},
	{name: "occurred_at not RFC 3339", base: confirmed, change: func(ev map[string]any) { ev["occurred_at"] = "2026-09-18 07:59:00" }, want: invalid, reason: mailtype.ReasonInvalidField},
	{name: "version 2", base: confirmed, change: func(ev map[string]any) { ev["version"] = 2 }, want: invalid, reason: mailtype.ReasonUnsupportedVersion},
	{name: "version as a string", base: cancelled, change: func(ev map[string]any) { ev["version"] = "1" }, want: invalid, reason: mailtype.ReasonInvalidField},
	{name: "missing dedupe_key", base: confirmed, change: func(ev map[string]any) { delete(ev, "dedupe_key") }, want: invalid, reason: mailtype.ReasonMissingField},
	{name: "missing order_id", base: cancelled, change: func(ev map[string]any) { delete(data(ev), "order_id") }, want: invalid, reason: mailtype.ReasonMissingField},
	{name: "order_id an object", base: confirmed, change: func(ev map[string]any) { data(ev)["order_id"] = map[string]any{"id": 42} }, want: invalid, reason: mailtype.ReasonInvalidField},
	{name: "order_id with a surrounding space", base: cancelled, change: func(ev map[string]any) { data(ev)["order_id"] = "42 " }, want: invalid, reason: mailtype.ReasonInvalidField},
	{name: "missing email", base: confirmed, change: func(ev map[string]any) { delete(data(ev), "email") }, want: invalid, reason: mailtype.ReasonMissingField},
	{name: "email with a display name", base: confirmed, change: func(ev map[string]any) { data(ev)["email"] = "B <b@example.com>" }, want: invalid, reason: mailtype.ReasonInvalidAddress},
	{name: "email not an address", base: confirmed, change: func(ev map[string]any) { data(ev)["email"] = "b.example.com" }, want: invalid, reason: mailtype.ReasonInvalidAddress},
	{name: "currency in lower case", base: confirmed, change: func(ev map[string]any) { data(ev)["currency"] = "vnd" }, want: invalid, reason: mailtype.ReasonInvalidField},
	{name: "total with grouping", base: confirmed, change: func(ev map[string]any) { data(ev)["total"] = "1,400,000" }, want: invalid, reason: mailtype.ReasonInvalidField},
	{name: "total a number", base: confirmed, change: func(ev map[string]any) { data(ev)["total"] = 1400000 }, want: invalid, reason: mailtype.ReasonInvalidField},
	{name: "negative unit_price", base: confirmed, change: func(ev map[string]any) { item(ev, 1)["unit_price"] = "-150000" }, want: invalid, reason: mailtype.ReasonInvalidField},
	{name: "quantity 0", base: confirmed, change: func(ev map[string]any) { item(ev, 0)["quantity"] = 0 }, want: invalid, reason: mailtype.ReasonInvalidField},
	{name: "no items", base: confirmed, change: func(ev map[string]any) { data(ev)["items"] = []any{} }, want: invalid, reason: mailtype.ReasonMissingField},
	{name: "customer_name with a line break", base: confirmed, change: func(ev map[string]any) { data(ev)["customer_name"] = "B\r\nBcc: x" }, want: invalid, reason: mailtype.ReasonInvalidField},
	{name: "revision 0", base: confirmed, change: func(ev map[string]any) { data(ev)["revision"] = 0 }, want: invalid, reason: mailtype.ReasonInvalidField},
	{name: "revision -1", base: confirmed, change: func(ev map[string]any) { data(ev)["revision"] = -1 }, want: invalid, reason: mailtype.ReasonInvalidField},
	{name: "revision 1.5", base: confirmed, change: func(ev map[string]any) { data(ev)["revision"] = 1.5 }, want: invalid, reason: mailtype.ReasonInvalidField},
	{name: `revision "2"`, base: confirmed, change: func(ev map[string]any) {
		data(ev)["revision"] = "2"
		ev["dedupe_key"] = "order-confirmed:42:r2"
	}, want: invalid, reason: mailtype.ReasonInvalidField},
	{name: "cancelled, revision 0", base: cancelled, change: func(ev map[string]any) { data(ev)["revision"] = 0 }, want: invalid, reason: mailtype.ReasonInvalidField},
	{name: "revision beyond 2147483647", base: cancelled, change: func(ev map[string]any) { data(ev)["revision"] = 2147483648 }, want: invalid, reason: mailtype.ReasonInvalidField},
	{name: "order_id ending in a revision suffix", base: confirmed, change: func(ev map[string]any) {
		data(ev)["order_id"] = "K:r2"
		ev["dedupe_key"] = "order-confirmed:K:r2"
	}, want: invalid, reason: mailtype.ReasonInvalidField},
	{name: "order_id with a resend suffix", base: cancelled, change: func(ev map[string]any) { data(ev)["order_id"] = "K:resend:1" }, want: invalid, reason: mailtype.ReasonInvalidField},
	{name: "order_id with a colon elsewhere is fine", base: cancelled, change: func(ev map[string]any) { data(ev)["order_id"] = "shop:r2x:42" }, want: valid},

	{name: "confirmed with an attachment", base: withInvoice, want: valid},
	{name: "attachments null", base: confirmed, change: func(ev map[string]any) { data(ev)["attachments"] = nil }, want: valid},
	{name: "attachment over http", base: withInvoice, change: func(ev map[string]any) { attachment(ev)["url"] = "http://invoices.example.com/42.pdf" }, want: invalid, reason: mailtype.ReasonInvalidField},
	{name: "attachment file name with a slash", base: withInvoice, change: func(ev map[string]any) { attachment(ev)["file_name"] = "../../etc/passwd" }, want: invalid, reason: mailtype.ReasonInvalidField},
	{name: "attachment file name with a backslash", base: withInvoice, change: func(ev map[string]any) { attachment(ev)["file_name"] = `C:\invoice.pdf` }, want: invalid, reason: mailtype.ReasonInvalidField},
	{name: "attachment file name with a line break", base: withInvoice, change: func(ev map[string]any) { attachment(ev)["file_name"] = "a\r\nContent-Type: text/html.pdf" }, want: invalid, reason: mailtype.ReasonInvalidField},
	{name: "attachment file name with a C1 control", base: withInvoice, change: func(ev map[string]any) { attachment(ev)["file_name"] = "a\u0085b.pdf" }, want: invalid, reason: mailtype.ReasonInvalidField},
	{name: "attachment file name ..", base: withInvoice, change: func(ev map[string]any) { attachment(ev)["file_name"] = ".." }, want: invalid, reason: mailtype.ReasonInvalidField},
	{name: "attachment file name with a right-to-left override", base: withInvoice, change: func(ev map[string]any) { attachment(ev)["file_name"] = "invoice\u202Efdp.exe" }, want: invalid, reason: mailtype.ReasonInvalidField},
	{name: "attachment file name blank", base: withInvoice, change: func(ev map[string]any) { attachment(ev)["file_name"] = "\u00a0 " }, want: invalid, reason: mailtype.ReasonInvalidField},
	{name: "attachment checksum in upper case", base: withInvoice, change: func(ev map[string]any) { attachment(ev)["sha256"] = strings.Repeat("AB", 32) }, want: invalid, reason: mailtype.ReasonInvalidField},
	{name: "attachment content type with parameters", base: withInvoice, change: func(ev map[string]any) { attachment(ev)["content_type"] = "application/pdf; name=x" }, want: invalid, reason: mailtype.ReasonInvalidField},
	{name: "attachment without a size", base: withInvoice, change: func(ev map[string]any) { delete(attachment(ev), "size") }, want: invalid, reason: mailtype.ReasonMissingField},
	{name: "attachment size 0", base: withInvoice, change: func(ev map[string]any) { attachment(ev)["size"] = 0 }, want: invalid, reason: mailtype.ReasonInvalidField},
	{name: "eleven attachments", base: withInvoice, change: func(ev map[string]any) {
		a := attachment(ev)
		for range 10 {
			data(ev)["attachments"] = append(data(ev)["attachments"].([]any), a)
		}
	}, want: invalid, reason: mailtype.ReasonInvalidField},
	{name: "attachments over mail.max_attachment_bytes in total", base: withInvoice, change: func(ev map[string]any) {
		attachment(ev)["size"] = 10<<20 + 1
	}, want: consumerOnly, reason: mailtype.ReasonInvalidField},
	{name: "attachment file name over 255 bytes, not characters", base: withInvoice, change: func(ev map[string]any) { attachment(ev)["file_name"] = strings.Repeat("đ", 128) }, want: consumerOnly, reason: mailtype.ReasonInvalidField},

	{name: "another event type", base: cancelled, change: func(ev map[string]any) { ev["event_type"] = "OrderShipped" }, want: ignored},

	{name: "dedupe_key of another order", base: confirmed, change: func(ev map[string]any) { ev["dedupe_key"] = "order-confirmed:43" }, want: consumerOnly, reason: mailtype.ReasonInvalidField},
	{name: "revision 2 with the first key", base: confirmed, change: func(ev map[string]any) { data(ev)["revision"] = 2 }, want: consumerOnly, reason: mailtype.ReasonInvalidField},
	{name: "revision 1 with a revision key", base: confirmed, change: func(ev map[string]any) { ev["dedupe_key"] = "order-confirmed:42:r1" }, want: consumerOnly, reason: mailtype.ReasonInvalidField},
	{name: "message_id differs from event_id", base: cancelled, messageID: "0192f4c4-0000-7b4a-9c1d-2e5f6a7b8c9d", want: consumerOnly, reason: mailtype.ReasonMessageIDMismatch},
	{name: "currency not in ISO 4217", base: confirmed, change: func(ev map[string]any) { data(ev)["currency"] = "XYZ" }, want: consumerOnly, reason: mailtype.ReasonInvalidField},
	{name: "more decimals than the currency has", base: confirmed, change: func(ev map[string]any) { item(ev, 0)["unit_price"] = "625000.5" }, want: consumerOnly, reason: mailtype.ReasonInvalidField},
	{name: "an integer written 1.0", base: confirmed, change: func(ev map[string]any) { ev["version"] = json.RawMessage("1.0") }, want: consumerOnly, reason: mailtype.ReasonInvalidField},
	{name: "a revision written 2.0", base: cancelled, change: func(ev map[string]any) { data(ev)["revision"] = json.RawMessage("2.0") }, want: consumerOnly, reason: mailtype.ReasonInvalidField},
	{name: "a revision written 1e2", base: cancelled, change: func(ev map[string]any) { data(ev)["revision"] = json.RawMessage("1e2") }, want: consumerOnly, reason: mailtype.ReasonInvalidField},
	{name: "order_id over 200 bytes but not characters", base: cancelled, change: func(ev map[string]any) { data(ev)["order_id"] = strings.Repeat("đ", 101) }, want: consumerOnly, reason: mailtype.ReasonInvalidField},
	{name: "a NUL in an unknown field", base: confirmed, change: func(ev map[string]any) { data(ev)["note"] = "a\x00b" }, want: consumerOnly, reason: mailtype.ReasonInvalidField},
	{name: "body over 256 KiB", base: cancelled, change: func(ev map[string]any) { data(ev)["note"] = strings.Repeat("x", 262144) }, want: consumerOnly, reason: mailtype.ReasonTooLarge},
	// Two keys encoding/json takes for one field: the schema's parser
	// keeps one, Go's another; the consumer refuses both.
	{name: "email twice", raw: replaced(confirmed, `"email":"b@example.com"`, `"email":"b@example.com","email":"victim@example.com"`), want: consumerOnly, reason: mailtype.ReasonMalformedJSON},
	{name: "email and EMAIL", raw: replaced(confirmed, `"email":"b@example.com"`, `"email":"b@example.com","EMAIL":"victim@example.com"`), want: consumerOnly, reason: mailtype.ReasonMalformedJSON},
	{name: "event_type twice", raw: replaced(confirmed, `"event_type":"OrderConfirmed"`, `"event_type":"OrderShipped","event_type":"OrderConfirmed"`), want: consumerOnly, reason: mailtype.ReasonMalformedJSON},
	{name: "an item's sku and SKU", raw: replaced(confirmed, `"sku":"SKU-1"`, `"sku":"SKU-1","SKU":"SKU-9"`), want: consumerOnly, reason: mailtype.ReasonMalformedJSON},
	{name: "order_id twice in a cancel", raw: replaced(cancelled, `"order_id":"42"`, `"order_id":"42","order_id":"43"`), want: consumerOnly, reason: mailtype.ReasonMalformedJSON},
}

// replaced is base() as JSON with old, which must occur once, replaced by
// new: JSON that encoding/json never writes.
func replaced(base func() map[string]any, old, new string) string {
	b, err := json.Marshal(base())
	if err != nil || strings.Count(string(b), old) != 1 {
		panic(fmt.Sprintf("replaced: %q is not once in %s (%v)", old, b, err))
	}
	return strings.Replace(string(b), old, new, 1)
}

// TestSchemaAndConsumerAgree runs every example through the schema and the
// consumer: they give the same verdict, so the two cannot drift apart.
func TestSchemaAndConsumerAgree(t *testing.T) {
	t.Parallel()
	require.GreaterOrEqual(t, len(driftCases), 25)
	d := newDecider(t)
	for _, c := range driftCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			body := []byte(c.raw)
			if c.raw == "" {
				ev := c.base()
				if c.change != nil {
					c.change(ev)
				}
				var err error
				body, err = json.Marshal(ev)
				require.NoError(t, err)
			}
			schema := api.ValidateInput(body)
			dec := d.Decide(consumerMessage(body, c.messageID))
			switch c.want {
			case valid:
				require.Empty(t, schema, "the schema refuses a valid event")
				require.Equal(t, consumer.ActionRecord, dec.Action, "the consumer refuses a valid event: %v", dec.Err)
			case invalid:
				require.NotEmpty(t, schema, "the schema accepts an invalid event")
				require.Equal(t, consumer.ActionDeadLetter, dec.Action, "the consumer accepts an invalid event")
				require.Equal(t, c.reason, dec.Err.Reason, "%v", dec.Err)
			case consumerOnly:
				require.Empty(t, schema, "a rule only the consumer can judge, yet the schema refuses")
				require.Equal(t, consumer.ActionDeadLetter, dec.Action, "the consumer accepts an invalid event")
				require.Equal(t, c.reason, dec.Err.Reason, "%v", dec.Err)
			case ignored:
				require.NotEmpty(t, schema, "the schema accepts an event type outside the contract")
				require.Equal(t, consumer.ActionIgnore, dec.Action, "%v", dec.Err)
			}
		})
	}
}
