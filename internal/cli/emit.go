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
	"golang.org/x/time/rate"

	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/config"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/operator"
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
	// from is the --from file; orders every event's order and revision.
	from   string
	orders []operator.OrderLine
	// rate is the most events per second; 0 is no limit.
	rate   float64
	dryRun bool
	// attachURL, attachFile and attachName are --attach-url,
	// --attach-file, --attach-name; attachment is what check read.
	attachURL, attachFile, attachName string
	attachment                        *sampleAttachment
}

func newEmitCmd(e *env) *cobra.Command {
	var o emitOptions
	cmd := &cobra.Command{
		Use:   "emit order-confirmed|order-cancelled --order-id ID | order-cancelled --from FILE",
		Short: "Publish order events (fresh UUIDv7 event ids) to the input exchange: samples for demos and load, or cancellations of listed orders",
		Long: `Publishes well-formed events (docs/contract.md, "Input") to amqp.input_exchange with
publisher confirms. With --count N > 1 the order ids are ID, ID+1, ... (numeric ID) or ID-1, ID-2, ...
With --duplicate every event is published twice with the same event_id, as a producer retry would.

order-cancelled --from FILE publishes one OrderCancelled per listed order: one order id a line,
or "ORDER REVISION" for an order reopened and confirmed again (else --revision); empty lines and
# comments are skipped, a repeated line is published once. A line that is not an order refuses
the whole file before anything is published. --rate paces it, --dry-run lists what it would
publish. (order-confirmed takes no --from: its samples carry made-up recipients and items.)`,
		Example: "  mailsvc emit order-confirmed --order-id 42 --locale vi\n  mailsvc emit order-cancelled --order-id 42\n" +
			"  mailsvc emit order-confirmed --order-id 1000 --count 5000\n  mailsvc emit order-cancelled --from cancelled.txt --rate 50 --dry-run",
		Args:      cobra.MatchAll(cobra.ExactArgs(1), cobra.OnlyValidArgs),
		ValidArgs: []string{"order-confirmed", "order-cancelled"},
		RunE: func(cmd *cobra.Command, args []string) error {
			o.kind = mailtype.OrderConfirmed
			if args[0] == "order-cancelled" {
				o.kind = mailtype.OrderCancelled
			}
			if err := o.check(cmd.InOrStdin()); err != nil {
				return err
			}
			if o.dryRun {
				return emitDryRun(e.stdout, o)
			}
			cfg, err := e.load()
			if err != nil {
				return err
			}
			return emit(e.ctx, e.stdout, cfg, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.orderID, "order-id", "", "order id (required unless --from)")
	f.StringVar(&o.from, "from", "", `order-cancelled only: a file of order ids, one a line, "ORDER REVISION" where needed ("-": stdin)`)
	f.StringVar(&o.email, "email", "b@example.com", "recipient address")
	f.StringVar(&o.locale, "locale", "vi", "vi or en: the customer, items and currency of the sample")
	f.IntVar(&o.count, "count", 1, "number of events (consecutive order ids)")
	f.BoolVar(&o.duplicate, "duplicate", false, "publish every event twice with the same event_id")
	f.IntVar(&o.revision, "revision", 1, "data.revision: the order's revision (a reopened order is confirmed again as revision 2, ...)")
	f.Float64Var(&o.rate, "rate", 0, "at most N events per second (0: as fast as the broker confirms)")
	f.BoolVar(&o.dryRun, "dry-run", false, "list the events that would be published; publish nothing")
	f.StringVar(&o.attachURL, "attach-url", "", "order-confirmed only: attach the file at this https URL by reference (data.attachments)")
	f.StringVar(&o.attachFile, "attach-file", "", "with --attach-url: a local copy of that file, for its SHA-256, size and type (.pdf: application/pdf)")
	f.StringVar(&o.attachName, "attach-name", "", "with --attach-url: the file name the recipient sees (default: --attach-file's base name)")
	return cmd
}

// check validates the flags and reads --from into o.orders; after it,
// o.orders holds every event's order, in publish order.
func (o *emitOptions) check(stdin io.Reader) error {
	if o.count < 1 || (o.locale != "vi" && o.locale != "en") || o.revision < 1 || o.rate < 0 {
		return errors.New("--count and --revision must be >= 1, --rate >= 0 and --locale vi or en")
	}
	if err := o.readAttachment(); err != nil {
		return err
	}
	if o.from == "" {
		if o.orderID == "" {
			return errors.New("--order-id or --from is required")
		}
		for i := range o.count {
			o.orders = append(o.orders, operator.OrderLine{OrderID: nthOrderID(o.orderID, i, o.count), Revision: o.revision})
		}
		return nil
	}
	if o.kind != mailtype.OrderCancelled || o.orderID != "" || o.count != 1 {
		return &ExitError{Code: ExitInvalid, Err: errors.New("--from goes with order-cancelled, without --order-id and --count")}
	}
	lines, err := readOrderFile(stdin, "--from", o.from)
	if err != nil {
		return err
	}
	seen := map[operator.OrderLine]bool{}
	for _, l := range lines {
		l.Line = 0
		if l.Revision == 0 {
			l.Revision = o.revision
		}
		if !seen[l] {
			seen[l] = true
			o.orders = append(o.orders, l)
		}
	}
	return nil
}

// emitDryRun lists the events o would publish.
func emitDryRun(out io.Writer, o emitOptions) error {
	for i, ord := range o.orders {
		if i == dryRunShown {
			fmt.Fprintf(out, "... and %d more\n", len(o.orders)-i)
			break
		}
		_, key := sampleData(o, ord)
		fmt.Fprintf(out, "would publish %s order_id=%s revision=%d dedupe_key=%s\n", o.kind, ord.OrderID, ord.Revision, key)
	}
	_, err := fmt.Fprintf(out, "would publish %d %s events (dry run: nothing published)\n", len(o.orders), o.kind)
	return err
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
	// Attachments is data.attachments: the --attach-url file, if any.
	Attachments []sampleAttachment `json:"attachments,omitempty"`
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

// sampleData returns the data of a sample event for one order, and its
// dedupe key.
func sampleData(o emitOptions, ord operator.OrderLine) (any, string) {
	orderID := ord.OrderID
	rev := 0 // revision 1 is sent as absent, as producers without revisions do
	if ord.Revision > 1 {
		rev = ord.Revision
	}
	if o.kind == mailtype.OrderCancelled {
		return sampleCancel{OrderID: orderID, Reason: "customer_request", Revision: rev}, mailtype.CancelNoticeKey(orderID, ord.Revision)
	}
	d := sampleOrder{OrderID: orderID, Email: o.email, Locale: o.locale,
		CustomerName: "Nguyễn Văn B", Currency: "VND", Total: "1400000",
		Items:    []sampleItem{{"SKU-1", "Áo thun", 2, "625000"}, {"SKU-2", "Nón lá", 1, "150000"}},
		Revision: rev,
	}
	if o.attachment != nil {
		d.Attachments = []sampleAttachment{*o.attachment}
	}
	if o.locale == "en" {
		d.CustomerName, d.Currency, d.Total = "Jane Doe", "USD", "52.30"
		d.Items = []sampleItem{{"SKU-1", "T-shirt", 2, "19.90"}, {"SKU-2", "Cap", 1, "12.50"}}
	}
	return d, mailtype.ConfirmationKeyAt(orderID, ord.Revision)
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
		data, key := sampleData(o, o.orders[i])
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
	published, total := 0, len(o.orders)
	step := broker.MaxBatch / 2 // a --duplicate batch holds two messages per event
	limiter := rate.NewLimiter(rate.Inf, 0)
	if o.rate > 0 {
		step = max(1, min(step, int(o.rate)))
		limiter = rate.NewLimiter(rate.Limit(o.rate), step)
	}
	for from := 0; from < total; from += step {
		to := min(from+step, total)
		if err := limiter.WaitN(ctx, to-from); err != nil {
			return fmt.Errorf("published %d of %d events, then: %w", published, total, err)
		}
		msgs, events, err := sampleMessages(cfg, o, from, to)
		if err != nil {
			return err
		}
		if err := publishAll(ctx, pub, msgs); err != nil {
			return &ExitError{Code: ExitUnavailable, Err: fmt.Errorf("published %d of %d events, then: %w", published, total, err)}
		}
		published += len(events)
		if total <= 10 {
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
