package cli

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
)

// emitted is the part of an event the tests check.
type emitted struct {
	EventID    string    `json:"event_id"`
	EventType  string    `json:"event_type"`
	Version    int       `json:"version"`
	OccurredAt time.Time `json:"occurred_at"`
	DedupeKey  string    `json:"dedupe_key"`
	Data       struct {
		OrderID      string `json:"order_id"`
		Email        string `json:"email"`
		CustomerName string `json:"customer_name"`
		Locale       string `json:"locale"`
		Currency     string `json:"currency"`
		Total        string `json:"total"`
		Reason       string `json:"reason"`
		Items        []struct {
			Name     string `json:"name"`
			Quantity int    `json:"quantity"`
		} `json:"items"`
	} `json:"data"`
}

func TestEmitPublishesWellFormedEvents(t *testing.T) {
	t.Parallel()
	o := newOpsEnv(t, "")
	dlqTopology(t, o.names, nil)

	out, err := o.run(t, "emit", "order-confirmed", "--order-id", "41", "--count", "3", "--locale", "vi", "--email", "c@example.com")
	require.NoError(t, err)
	require.Contains(t, out, "published 3 OrderConfirmed events to "+o.names.InputExchange+" (3 messages, confirmed)")
	got := drain(t, o.names.Queue)
	require.Len(t, got, 3)
	ids := map[string]bool{}
	for i, g := range got {
		var ev emitted
		require.NoError(t, json.Unmarshal(g.Body, &ev))
		id, err := uuid.Parse(ev.EventID)
		require.NoError(t, err)
		require.EqualValues(t, 7, id.Version())
		ids[ev.EventID] = true
		require.Equal(t, ev.EventID, g.MessageID)
		require.Equal(t, "OrderConfirmed", g.Type)
		require.Equal(t, "order.confirmed", g.RoutingKey)
		require.Equal(t, "application/json", g.ContentType)
		require.True(t, g.Persistent)
		require.Equal(t, 1, ev.Version)
		require.WithinDuration(t, time.Now(), ev.OccurredAt, time.Minute)
		wantOrder := []string{"41", "42", "43"}[i]
		require.Equal(t, "order-confirmed:"+wantOrder, ev.DedupeKey)
		require.Equal(t, wantOrder, ev.Data.OrderID)
		require.Equal(t, "c@example.com", ev.Data.Email)
		require.Equal(t, "Nguyễn Văn B", ev.Data.CustomerName)
		require.Equal(t, "VND", ev.Data.Currency)
		require.Equal(t, "1400000", ev.Data.Total)
		require.Equal(t, "Áo thun", ev.Data.Items[0].Name)
	}
	require.Len(t, ids, 3, "a fresh event id per event")

	out, err = o.run(t, "emit", "order-confirmed", "--order-id", "A-7", "--locale", "en", "--duplicate")
	require.NoError(t, err)
	require.Contains(t, out, "(2 messages, confirmed)")
	got = drain(t, o.names.Queue)
	require.Len(t, got, 2)
	require.Equal(t, got[0].MessageID, got[1].MessageID, "--duplicate re-publishes the same event")
	require.Equal(t, got[0].Body, got[1].Body)
	var en emitted
	require.NoError(t, json.Unmarshal(got[0].Body, &en))
	require.Equal(t, "A-7", en.Data.OrderID)
	require.Equal(t, "USD", en.Data.Currency)
	require.Equal(t, "52.30", en.Data.Total)

	_, err = o.run(t, "emit", "order-cancelled", "--order-id", "42")
	require.NoError(t, err)
	got = drain(t, o.names.Queue)
	require.Len(t, got, 1)
	var c emitted
	require.NoError(t, json.Unmarshal(got[0].Body, &c))
	require.Equal(t, "OrderCancelled", c.EventType)
	require.Equal(t, "order.cancelled", got[0].RoutingKey)
	require.Equal(t, "42", c.Data.OrderID)
	require.Equal(t, "customer_request", c.Data.Reason)
}

func TestEmitRefusals(t *testing.T) {
	t.Parallel()
	o := newOpsEnv(t, "")
	// No topology yet: the exchange does not exist.
	_, err := o.run(t, "emit", "order-confirmed", "--order-id", "1")
	require.Equal(t, ExitUnavailable, ExitCode(err))
	require.ErrorContains(t, err, "mailsvc serve")

	// The exchange exists but nothing is bound for the key.
	brokertest.DeclareExchange(t, o.names.InputExchange)
	_, err = o.run(t, "emit", "order-confirmed", "--order-id", "1")
	require.Equal(t, ExitUnavailable, ExitCode(err))
	require.ErrorContains(t, err, "no queue is bound for that routing key")

	for _, args := range [][]string{
		{"emit", "order-shipped", "--order-id", "1"},
		{"emit", "order-confirmed"},
		{"emit", "order-confirmed", "--order-id", "1", "--locale", "fr"},
		{"emit", "order-confirmed", "--order-id", "1", "--count", "0"},
	} {
		_, err := o.run(t, args...)
		require.Error(t, err, args)
		require.Equal(t, 1, ExitCode(err), args)
	}

	cfg := writeOpsConfig(t, o.sc.URL, "amqp://guest:guest@127.0.0.1:1/", o.names, "")
	_, err = runCLI(t, cfg, "emit", "order-confirmed", "--order-id", "1")
	require.Equal(t, ExitUnavailable, ExitCode(err))
	require.ErrorContains(t, err, "check amqp.url")
}

// The incident recipe "republish OrderCancelled for those orders": one
// event per listed order (a revision where the line gives one, a repeated
// line once), a dry run publishing nothing, a bad line refusing the file.
func TestEmitOrderCancelledFromFile(t *testing.T) {
	t.Parallel()
	o := newOpsEnv(t, "")
	dlqTopology(t, o.names, nil)
	list := "\uFEFF# INC-7: orders cancelled while the consumer was down\n 41\u00a0\n\nA-7 2\n41\n43\t3\n"

	out, _, err := o.runIO(t, list, "emit", "order-cancelled", "--from", "-", "--dry-run")
	require.NoError(t, err)
	require.Equal(t, "would publish OrderCancelled order_id=41 revision=1 dedupe_key=order-cancelled:41\n"+
		"would publish OrderCancelled order_id=A-7 revision=2 dedupe_key=order-cancelled:A-7:r2\n"+
		"would publish OrderCancelled order_id=43 revision=3 dedupe_key=order-cancelled:43:r3\n"+
		"would publish 3 OrderCancelled events (dry run: nothing published)\n", out)
	require.Equal(t, 0, depth(t, o.names.Queue))

	out, _, err = o.runIO(t, list, "emit", "order-cancelled", "--from", "-", "--rate", "100")
	require.NoError(t, err)
	require.Contains(t, out, "published 3 OrderCancelled events to "+o.names.InputExchange+" (3 messages, confirmed)")
	got := drain(t, o.names.Queue)
	require.Len(t, got, 3)
	type cancel struct {
		EventType string `json:"event_type"`
		DedupeKey string `json:"dedupe_key"`
		Data      struct {
			OrderID  string `json:"order_id"`
			Revision int    `json:"revision"`
		} `json:"data"`
	}
	var evs []cancel
	for _, g := range got {
		var ev cancel
		require.NoError(t, json.Unmarshal(g.Body, &ev))
		require.Equal(t, "order.cancelled", g.RoutingKey)
		evs = append(evs, ev)
	}
	want := []cancel{{EventType: "OrderCancelled", DedupeKey: "order-cancelled:41"}, {EventType: "OrderCancelled", DedupeKey: "order-cancelled:A-7:r2"},
		{EventType: "OrderCancelled", DedupeKey: "order-cancelled:43:r3"}}
	want[0].Data.OrderID, want[1].Data.OrderID, want[1].Data.Revision, want[2].Data.OrderID, want[2].Data.Revision = "41", "A-7", 2, "43", 3
	require.Equal(t, want, evs)

	_, _, err = o.runIO(t, "41\n42 two\n", "emit", "order-cancelled", "--from", "-")
	require.ErrorContains(t, err, `--from -: line 2: not ORDER or ORDER REVISION (a revision is a whole number from 1): "42 two"`)
	require.Equal(t, ExitInvalid, ExitCode(err))
	_, _, err = o.runIO(t, "41\n\xff\xfe\n", "emit", "order-cancelled", "--from", "-")
	require.ErrorContains(t, err, "line 2: not an order id: not valid UTF-8")
	_, _, err = o.runIO(t, "41\n", "emit", "order-confirmed", "--from", "-")
	require.ErrorContains(t, err, "--from goes with order-cancelled")
	require.Equal(t, 0, depth(t, o.names.Queue), "nothing published by a refused file")
}
