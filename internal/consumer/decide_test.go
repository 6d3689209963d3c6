package consumer_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/consumer"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/templates"
)

var testNow = time.Date(2026, 9, 18, 8, 0, 0, 0, time.UTC)

func newDecider(t *testing.T) *consumer.Decider {
	t.Helper()
	reg, err := templates.New(templates.Options{})
	require.NoError(t, err)
	return &consumer.Decider{
		MaxBytes: 4096, MaxEventAge: 24 * time.Hour, FromDomain: "shop.example",
		Templates: reg, Now: func() time.Time { return testNow },
	}
}

// confirmedEvent is a valid OrderConfirmed as a JSON-ready map; tests
// change or delete fields.
func confirmedEvent(orderID string) map[string]any {
	return map[string]any{
		"event_id": uuid.NewString(), "event_type": "OrderConfirmed", "version": 1,
		"occurred_at": testNow.Add(-time.Minute).Format(time.RFC3339), "dedupe_key": "order-confirmed:" + orderID,
		"data": map[string]any{
			"order_id": orderID, "email": "b@example.com", "customer_name": "Nguyễn Văn B",
			"locale": "vi", "currency": "VND", "total": "1250000",
			"items": []any{map[string]any{"sku": "SKU-1", "name": "Áo thun", "quantity": 2, "unit_price": "625000"}},
		},
	}
}

func cancelledEvent(orderID string) map[string]any {
	return map[string]any{
		"event_id": uuid.NewString(), "event_type": "OrderCancelled", "version": 1,
		"occurred_at": testNow.Format(time.RFC3339), "data": map[string]any{"order_id": orderID, "reason": "customer"},
	}
}

func body(t testing.TB, ev map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(ev)
	require.NoError(t, err)
	return b
}

func data(ev map[string]any) map[string]any { return ev["data"].(map[string]any) }

func TestDecideOrderConfirmedRendersOnce(t *testing.T) {
	t.Parallel()
	d := newDecider(t)
	ev := confirmedEvent("42")
	ev["event_id"] = strings.ToUpper(ev["event_id"].(string))
	got := d.Decide(consumer.Message{Body: body(t, ev)})
	require.Equal(t, consumer.ActionRecord, got.Action, "%v", got.Err)
	require.Equal(t, "OrderConfirmed", got.EventType)
	m := got.Item.Mail
	require.NotNil(t, m)
	require.Equal(t, strings.ToLower(ev["event_id"].(string)), m.EventID, "canonical form")
	require.Equal(t, "order-confirmed:42", m.DedupeKey)
	require.Equal(t, "42", m.OrderID)
	require.Equal(t, "order_confirmed", m.Template)
	require.Equal(t, "vi", m.Locale)
	require.Equal(t, "b@example.com", m.ToEmail)
	require.Equal(t, mailtype.MessageID("order-confirmed:42", "shop.example"), m.MessageID)
	require.NotEmpty(t, m.Subject)
	require.NotEmpty(t, m.BodyText)
	require.NotEmpty(t, m.BodyHTML)
	require.JSONEq(t, string(body(t, data(ev))), string(m.Payload))
	require.False(t, m.Stale)
	require.Equal(t, mailtype.LaneBulk, m.Lane, "order_confirmed/settings.yaml")
	again := d.Decide(consumer.Message{Body: body(t, ev)}).Item.Mail
	require.Equal(t, m.Subject+m.BodyText+m.BodyHTML, again.Subject+again.BodyText+again.BodyHTML, "deterministic")
}

func TestDecideOrderIDAsNumber(t *testing.T) {
	t.Parallel()
	d := newDecider(t)
	ev := confirmedEvent("x")
	data(ev)["order_id"] = 42
	ev["dedupe_key"] = "order-confirmed:42"
	got := d.Decide(consumer.Message{Body: body(t, ev)})
	require.Equal(t, consumer.ActionRecord, got.Action, "%v", got.Err)
	require.Equal(t, "42", got.Item.Mail.OrderID)
}

func TestDecideStaleConfirmation(t *testing.T) {
	t.Parallel()
	d := newDecider(t)
	ev := confirmedEvent("43")
	ev["occurred_at"] = testNow.Add(-25 * time.Hour).Format(time.RFC3339)
	got := d.Decide(consumer.Message{Body: body(t, ev)})
	require.Equal(t, consumer.ActionRecord, got.Action, "%v", got.Err)
	require.True(t, got.Item.Mail.Stale)
	require.Equal(t, 24*time.Hour, got.Item.Mail.MaxAge)
}

func TestDecideOrderCancelled(t *testing.T) {
	t.Parallel()
	d := newDecider(t)
	ev := cancelledEvent("44")
	got := d.Decide(consumer.Message{Body: body(t, ev), MessageID: ev["event_id"].(string)})
	require.Equal(t, consumer.ActionRecord, got.Action, "%v", got.Err)
	require.Equal(t, "OrderCancelled", got.EventType)
	require.Nil(t, got.Item.Mail)
	require.Equal(t, "44", got.Item.Cancel.OrderID)
	require.Equal(t, ev["event_id"], got.Item.Cancel.EventID)
	require.Equal(t, "order_confirmed", got.Item.Cancel.Template)
}

func TestDecideIgnoresOtherEventTypes(t *testing.T) {
	t.Parallel()
	d := newDecider(t)
	got := d.Decide(consumer.Message{Body: []byte(`{"event_type":"OrderShipped","version":7}`)})
	require.Equal(t, consumer.ActionIgnore, got.Action)
	require.Equal(t, "other", got.EventType)
}

func TestDecidePoison(t *testing.T) {
	t.Parallel()
	d := newDecider(t)
	cases := []struct {
		name   string
		body   func() []byte
		msgID  string
		reason mailtype.Reason
	}{
		{"too large", func() []byte { return []byte(`{"pad":"` + strings.Repeat("x", 5000) + `"}`) }, "", mailtype.ReasonTooLarge},
		{"truncated json", func() []byte { return []byte(`{"event_id":`) }, "", mailtype.ReasonMalformedJSON},
		{"json array", func() []byte { return []byte(`[1,2]`) }, "", mailtype.ReasonMalformedJSON},
		{"not json", func() []byte { return []byte("hello") }, "", mailtype.ReasonMalformedJSON},
		{"no event_type", edit(func(ev map[string]any) { delete(ev, "event_type") }), "", mailtype.ReasonMissingField},
		{"no version", edit(func(ev map[string]any) { delete(ev, "version") }), "", mailtype.ReasonMissingField},
		{"version 2", edit(func(ev map[string]any) { ev["version"] = 2 }), "", mailtype.ReasonUnsupportedVersion},
		{"version as string", edit(func(ev map[string]any) { ev["version"] = "1" }), "", mailtype.ReasonInvalidField},
		{"no event_id", edit(func(ev map[string]any) { delete(ev, "event_id") }), "", mailtype.ReasonMissingField},
		{"event_id not a uuid", edit(func(ev map[string]any) { ev["event_id"] = "42" }), "", mailtype.ReasonInvalidField},
		{"message_id differs", edit(func(map[string]any) {}), uuid.NewString(), mailtype.ReasonMessageIDMismatch},
		{"no occurred_at", edit(func(ev map[string]any) { delete(ev, "occurred_at") }), "", mailtype.ReasonMissingField},
		{"dedupe_key of another scheme", edit(func(ev map[string]any) { ev["dedupe_key"] = "custom-key-42" }), "", mailtype.ReasonInvalidField},
		{"bad occurred_at", edit(func(ev map[string]any) { ev["occurred_at"] = "yesterday" }), "", mailtype.ReasonInvalidField},
		{"no dedupe_key", edit(func(ev map[string]any) { delete(ev, "dedupe_key") }), "", mailtype.ReasonMissingField},
		{"dedupe_key too long", edit(func(ev map[string]any) { ev["dedupe_key"] = strings.Repeat("k", 600) }), "", mailtype.ReasonInvalidField},
		{"no data", edit(func(ev map[string]any) { delete(ev, "data") }), "", mailtype.ReasonMissingField},
		{"no order_id", edit(func(ev map[string]any) { delete(data(ev), "order_id") }), "", mailtype.ReasonMissingField},
		{"fractional order_id", edit(func(ev map[string]any) { data(ev)["order_id"] = 4.5 }), "", mailtype.ReasonInvalidField},
		{"order_id with a line break", edit(func(ev map[string]any) { data(ev)["order_id"] = "4\n5" }), "", mailtype.ReasonInvalidField},
		{"no email", edit(func(ev map[string]any) { delete(data(ev), "email") }), "", mailtype.ReasonMissingField},
		{"invalid email", edit(func(ev map[string]any) { data(ev)["email"] = "not-an-address" }), "", mailtype.ReasonInvalidAddress},
		{"header injection", edit(func(ev map[string]any) { data(ev)["email"] = "b@example.com\r\nBcc: x@evil.example" }), "", mailtype.ReasonInvalidAddress},
		{"display name", edit(func(ev map[string]any) { data(ev)["email"] = "Bob <b@example.com>" }), "", mailtype.ReasonInvalidAddress},
		{"two addresses", edit(func(ev map[string]any) { data(ev)["email"] = "b@example.com, c@example.com" }), "", mailtype.ReasonInvalidAddress},
		{"name with CRLF", edit(func(ev map[string]any) { data(ev)["customer_name"] = "B\r\nBcc: x@evil.example" }), "", mailtype.ReasonInvalidField},
		{"NUL in item name", edit(func(ev map[string]any) { itemsOf(ev)[0].(map[string]any)["name"] = "a\x00b" }), "", mailtype.ReasonInvalidField},
		{"no currency", edit(func(ev map[string]any) { delete(data(ev), "currency") }), "", mailtype.ReasonMissingField},
		{"bad currency", edit(func(ev map[string]any) { data(ev)["currency"] = "dong" }), "", mailtype.ReasonInvalidField},
		{"total with separators", edit(func(ev map[string]any) { data(ev)["total"] = "1,250,000" }), "", mailtype.ReasonInvalidField},
		{"total as number", edit(func(ev map[string]any) { data(ev)["total"] = 1250000 }), "", mailtype.ReasonInvalidField},
		{"zero quantity", edit(func(ev map[string]any) { itemsOf(ev)[0].(map[string]any)["quantity"] = 0 }), "", mailtype.ReasonInvalidField},
		{"NUL in a field nobody reads", edit(func(ev map[string]any) { data(ev)["note"] = "a\x00b" }), "", mailtype.ReasonInvalidField},
		{"lone surrogate in a field nobody reads", rawData(`"note":"\ud83d"`), "", mailtype.ReasonInvalidField},
		{"number numeric cannot hold", rawData(`"weight":1e200000`), "", mailtype.ReasonInvalidField},
		{"cancel without order_id", func() []byte {
			ev := cancelledEvent("1")
			delete(data(ev), "order_id")
			return body(t, ev)
		}, "", mailtype.ReasonMissingField},
	}
	for _, tc := range cases {
		got := d.Decide(consumer.Message{Body: tc.body(), MessageID: tc.msgID})
		require.Equal(t, consumer.ActionDeadLetter, got.Action, tc.name)
		require.Equal(t, mailtype.Permanent, got.Err.Class, tc.name)
		require.Equal(t, tc.reason, got.Err.Reason, "%s: %v", tc.name, got.Err)
		require.NotContains(t, mailtype.Sanitize(got.Err.Error()), "b@example.com", tc.name)
	}
}

func edit(change func(map[string]any)) func() []byte {
	return func() []byte {
		ev := confirmedEvent("45")
		change(ev)
		b, _ := json.Marshal(ev)
		return b
	}
}

// rawData is a valid OrderConfirmed with member (raw JSON) added to its
// data, for JSON that encoding/json would never write.
func rawData(member string) func() []byte {
	return func() []byte {
		b, _ := json.Marshal(confirmedEvent("47"))
		return []byte(strings.Replace(string(b), `"data":{`, `"data":{`+member+`,`, 1))
	}
}

// A payload PostgreSQL can store is recorded, however unusual.
func TestDecideRecordsPayloadsJSONBHolds(t *testing.T) {
	t.Parallel()
	d := newDecider(t)
	for _, member := range []string{`"note":"\ud83d\ude00 \\u0000"`, `"weight":9e131071`, `"tiny":1e-16383`} {
		got := d.Decide(consumer.Message{Body: rawData(member)()})
		require.Equal(t, consumer.ActionRecord, got.Action, "%s: %v", member, got.Err)
		require.Contains(t, string(got.Item.Mail.Payload), member)
	}
}

func itemsOf(ev map[string]any) []any { return data(ev)["items"].([]any) }

// failingRenderer fails every render with err.
type failingRenderer struct{ err error }

func (f failingRenderer) Render(string, string, templates.Order) (templates.Rendered, error) {
	return templates.Rendered{}, f.err
}

func (f failingRenderer) Settings(string) (templates.Settings, error) {
	return templates.Settings{}, nil
}

func TestDecideRenderErrorsArePermanent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err    error
		reason mailtype.Reason
	}{
		{mailtype.Errorf(mailtype.Permanent, mailtype.ReasonInvalidField, "total is not the sum of the lines"), mailtype.ReasonInvalidField},
		{errors.New("template: exec failed"), mailtype.ReasonRender},
	} {
		d := newDecider(t)
		d.Templates = failingRenderer{tc.err}
		got := d.Decide(consumer.Message{Body: body(t, confirmedEvent("46"))})
		require.Equal(t, consumer.ActionDeadLetter, got.Action)
		require.Equal(t, mailtype.Permanent, got.Err.Class)
		require.Equal(t, tc.reason, got.Err.Reason)
		require.ErrorIs(t, got.Err, tc.err)
	}
}

// data.revision (absent meaning 1) keys a confirmation by revision and
// scopes a cancel to it; anything but a positive integer is
// invalid_field, for both event types.
func TestDecideRevision(t *testing.T) {
	t.Parallel()
	d := newDecider(t)
	rev2 := confirmedEvent("77")
	data(rev2)["revision"] = 2
	rev2["dedupe_key"] = "order-confirmed:77:r2"
	dec := d.Decide(consumer.Message{Body: body(t, rev2)})
	require.Equal(t, consumer.ActionRecord, dec.Action, "%v", dec.Err)
	require.Equal(t, 2, dec.Item.Mail.Revision)
	require.Equal(t, "order-confirmed:77:r2", dec.Item.Mail.DedupeKey)

	one := confirmedEvent("77")
	data(one)["revision"] = 1
	dec = d.Decide(consumer.Message{Body: body(t, one)})
	require.Equal(t, consumer.ActionRecord, dec.Action, "%v", dec.Err)
	require.Equal(t, 1, dec.Item.Mail.Revision)

	wrongKey := confirmedEvent("77")
	data(wrongKey)["revision"] = 2 // but dedupe_key is still revision 1's
	dec = d.Decide(consumer.Message{Body: body(t, wrongKey)})
	require.Equal(t, consumer.ActionDeadLetter, dec.Action)
	require.Equal(t, mailtype.ReasonInvalidField, dec.Err.Reason)
	require.Contains(t, dec.Err.Error(), `must be "order-confirmed:77:r2"`)

	c := cancelledEvent("77")
	data(c)["revision"] = 3
	dec = d.Decide(consumer.Message{Body: body(t, c)})
	require.Equal(t, consumer.ActionRecord, dec.Action, "%v", dec.Err)
	require.Equal(t, 3, dec.Item.Cancel.Revision)
	dec = d.Decide(consumer.Message{Body: body(t, cancelledEvent("77"))})
	require.Equal(t, 1, dec.Item.Cancel.Revision, "absent means 1")

	for _, bad := range []any{0, -1, 1.5, "2", nil, true, 1e10, map[string]any{}, json.RawMessage("2.0"), json.RawMessage("1e2"),
		json.RawMessage("2147483648"), json.RawMessage("-0")} {
		for _, ev := range []map[string]any{confirmedEvent("78"), cancelledEvent("78")} {
			data(ev)["revision"] = bad
			dec := d.Decide(consumer.Message{Body: body(t, ev)})
			require.Equal(t, consumer.ActionDeadLetter, dec.Action, "revision %#v of %s", bad, ev["event_type"])
			require.Equal(t, mailtype.ReasonInvalidField, dec.Err.Reason, "revision %#v", bad)
		}
	}
}

// An order id that ends in ":r" and digits or contains ":resend:" would
// share its dedupe keys with a revision or a resend of another order: it
// is dead-lettered, never silently taken for a duplicate.
func TestDecideOrderIDWithAReservedSuffix(t *testing.T) {
	t.Parallel()
	d := newDecider(t)
	for _, id := range []string{"K:r2", "K:r2:r3", "K:resend:1", "a:resend:"} {
		ev := confirmedEvent(id)
		dec := d.Decide(consumer.Message{Body: body(t, ev)})
		require.Equal(t, consumer.ActionDeadLetter, dec.Action, id)
		require.Equal(t, mailtype.ReasonInvalidField, dec.Err.Reason, id)
		dec = d.Decide(consumer.Message{Body: body(t, cancelledEvent(id))})
		require.Equal(t, consumer.ActionDeadLetter, dec.Action, id)
	}
	for _, id := range []string{"K:r", "K:rx2", "shop:r2x:42", "K:resend"} {
		dec := d.Decide(consumer.Message{Body: body(t, confirmedEvent(id))})
		require.Equal(t, consumer.ActionRecord, dec.Action, "%s: %v", id, dec.Err)
	}
}
