package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/config"
	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// emitOptions are the flags of `emit`.
type emitOptions struct {
	kind      mailtype.EventType
	orderID   string
	email     string
	locale    string
	count     int
	duplicate bool
	// revision is data.revision; 0 or 1 leaves it out (absent means 1).
	revision int
}

func newEmitCmd(e *env) *cobra.Command {
	var o emitOptions
	cmd := &cobra.Command{
		Use:   "emit order-confirmed|order-cancelled --order-id ID",
		Short: "Publish sample order events (fresh UUIDv7 event ids) to the input exchange, for demos and load",
		Long: `Publishes well-formed sample events (docs/contract.md, "Input") to amqp.input_exchange with
publisher confirms. With --count N > 1 the order ids are ID, ID+1, ... (numeric ID) or ID-1, ID-2, ...
With --duplicate every event is published twice with the same event_id, as a producer retry would.`,
		Example:   "  mailsvc emit order-confirmed --order-id 42 --locale vi\n  mailsvc emit order-cancelled --order-id 42\n  mailsvc emit order-confirmed --order-id 1000 --count 5000",
		Args:      cobra.MatchAll(cobra.ExactArgs(1), cobra.OnlyValidArgs),
		ValidArgs: []string{"order-confirmed", "order-cancelled"},
		RunE: func(_ *cobra.Command, args []string) error {
			o.kind = mailtype.OrderConfirmed
			if args[0] == "order-cancelled" {
				o.kind = mailtype.OrderCancelled
			}
			if o.orderID == "" || o.count < 1 || (o.locale != "vi" && o.locale != "en") || o.revision < 1 {
				return errors.New("--order-id is required, --count and --revision must be >= 1 and --locale vi or en")
			}
			cfg, err := e.load()
			if err != nil {
				return err
			}
			return emit(e.ctx, e.stdout, cfg, o)
		},
	}
	cmd.Flags().StringVar(&o.orderID, "order-id", "", "order id (required)")
	cmd.Flags().StringVar(&o.email, "email", "b@example.com", "recipient address")
	cmd.Flags().StringVar(&o.locale, "locale", "vi", "vi or en: the customer, items and currency of the sample")
	cmd.Flags().IntVar(&o.count, "count", 1, "number of events (consecutive order ids)")
	cmd.Flags().BoolVar(&o.duplicate, "duplicate", false, "publish every event twice with the same event_id")
	cmd.Flags().IntVar(&o.revision, "revision", 1, "data.revision: the order's revision (a reopened order is confirmed again as revision 2, ...)")
	return cmd
}

// sampleEvent is an input event (docs/contract.md, "Input").
type sampleEvent struct {
	EventID    string             `json:"event_id"`
	EventType  mailtype.EventType `json:"event_type"`
	Version    int                `json:"version"`
	OccurredAt time.Time          `json:"occurred_at"`
	DedupeKey  string             `json:"dedupe_key"`
	Data       any                `json:"data"`
}

type sampleOrder struct {
	OrderID      string       `json:"order_id"`
	Email        string       `json:"email"`
	CustomerName string       `json:"customer_name"`
	Locale       string       `json:"locale"`
	Currency     string       `json:"currency"`
	Total        string       `json:"total"`
	Items        []sampleItem `json:"items"`
	Revision     int          `json:"revision,omitempty"`
}

type sampleItem struct {
	SKU       string `json:"sku"`
	Name      string `json:"name"`
	Quantity  int    `json:"quantity"`
	UnitPrice string `json:"unit_price"`
}

type sampleCancel struct {
	OrderID  string `json:"order_id"`
	Reason   string `json:"reason"`
	Revision int    `json:"revision,omitempty"`
}

// sampleData returns the data of a sample event for one order.
func sampleData(o emitOptions, orderID string) (any, string) {
	rev := 0 // revision 1 is sent as absent, as producers without revisions do
	if o.revision > 1 {
		rev = o.revision
	}
	if o.kind == mailtype.OrderCancelled {
		return sampleCancel{OrderID: orderID, Reason: "customer_request", Revision: rev}, mailtype.CancelNoticeKey(orderID, o.revision)
	}
	d := sampleOrder{OrderID: orderID, Email: o.email, Locale: o.locale,
		CustomerName: "Nguyễn Văn B", Currency: "VND", Total: "1400000",
		Items:    []sampleItem{{"SKU-1", "Áo thun", 2, "625000"}, {"SKU-2", "Nón lá", 1, "150000"}},
		Revision: rev,
	}
	if o.locale == "en" {
		d.CustomerName, d.Currency, d.Total = "Jane Doe", "USD", "52.30"
		d.Items = []sampleItem{{"SKU-1", "T-shirt", 2, "19.90"}, {"SKU-2", "Cap", 1, "12.50"}}
	}
	return d, mailtype.ConfirmationKeyAt(orderID, o.revision)
}

// nthOrderID is the order id of the i-th event (from 0).
func nthOrderID(id string, i, count int) string {
	if count == 1 {
		return id
	}
	if n, err := strconv.ParseInt(id, 10, 64); err == nil {
		return strconv.FormatInt(n+int64(i), 10)
	}
	return fmt.Sprintf("%s-%d", id, i+1)
}

// sampleMessages builds the messages of events [from, to).
func sampleMessages(cfg *config.Config, o emitOptions, from, to int) ([]broker.Message, []sampleEvent, error) {
	var msgs []broker.Message
	var events []sampleEvent
	rk := "order.confirmed"
	if o.kind == mailtype.OrderCancelled {
		rk = "order.cancelled"
	}
	for i := from; i < to; i++ {
		id, err := uuid.NewV7()
		if err != nil {
			return nil, nil, fmt.Errorf("new event id: %w", err)
		}
		data, key := sampleData(o, nthOrderID(o.orderID, i, o.count))
		ev := sampleEvent{EventID: id.String(), EventType: o.kind, Version: 1, OccurredAt: time.Now().UTC(), DedupeKey: key, Data: data}
		body, err := json.Marshal(ev)
		if err != nil {
			return nil, nil, fmt.Errorf("encode event: %w", err)
		}
		m := broker.Message{Exchange: cfg.AMQP.InputExchange, RoutingKey: rk, MessageID: ev.EventID, Type: string(o.kind),
			ContentType: "application/json", Timestamp: ev.OccurredAt, Body: body, Mandatory: true, Persistent: true}
		msgs = append(msgs, m)
		if o.duplicate {
			msgs = append(msgs, m)
		}
		events = append(events, ev)
	}
	return msgs, events, nil
}

func emit(ctx context.Context, out io.Writer, cfg *config.Config, o emitOptions) error {
	conn, err := broker.Dial(operatorBroker(cfg, "mailsvc-emit"))
	if err != nil {
		return &ExitError{Code: ExitUnavailable, Err: fmt.Errorf("%w (check amqp.url and amqp.tls_*, or start RabbitMQ)", err)}
	}
	defer conn.Close()
	pub, err := broker.NewPublisher(conn)
	if err != nil {
		return &ExitError{Code: ExitUnavailable, Err: err}
	}
	defer pub.Close()
	published := 0
	step := broker.MaxBatch / 2 // a --duplicate batch holds two messages per event
	for from := 0; from < o.count; from += step {
		msgs, events, err := sampleMessages(cfg, o, from, min(from+step, o.count))
		if err != nil {
			return err
		}
		if err := publishAll(ctx, pub, msgs); err != nil {
			return &ExitError{Code: ExitUnavailable, Err: fmt.Errorf("published %d of %d events, then: %w", published, o.count, err)}
		}
		published += len(events)
		if o.count <= 10 {
			for _, ev := range events {
				fmt.Fprintf(out, "published %s event_id=%s dedupe_key=%s\n", ev.EventType, ev.EventID, ev.DedupeKey)
			}
		}
	}
	_, err = fmt.Fprintf(out, "published %d %s events to %s (%d messages, confirmed)\n", published, o.kind, cfg.AMQP.InputExchange, published*copies(o))
	return err
}

func copies(o emitOptions) int {
	if o.duplicate {
		return 2
	}
	return 1
}

func publishAll(ctx context.Context, pub *broker.Publisher, msgs []broker.Message) error {
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for i, err := range pub.PublishBatch(pctx, msgs) {
		if err != nil {
			return fmt.Errorf("publish %s with key %s to %s: %w", msgs[i].MessageID, msgs[i].RoutingKey, msgs[i].Exchange, broker.PublishHint(err))
		}
	}
	return nil
}
