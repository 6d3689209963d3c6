package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// MaxBatch is the most messages one PublishBatch call takes: the size of
// the basic.return buffer, which must never fill while we wait on confirms
// (a full buffer would block amqp091-go's reader and the confirms behind it).
const MaxBatch = 1024

// Errors PublishBatch returns per message.
var (
	// ErrNacked: the broker answered basic.nack.
	ErrNacked = errors.New("broker nacked the publish")
	// ErrReturned: the message was mandatory and no queue was bound
	// (basic.return), so it is stored nowhere.
	ErrReturned = errors.New("broker returned the publish as unroutable")
	// ErrConfirmTimeout: no confirm arrived before the deadline.
	ErrConfirmTimeout = errors.New("no publisher confirm before the deadline")
	// ErrChannelClosed: the channel closed before the confirm arrived.
	ErrChannelClosed = errors.New("channel closed before the publisher confirm")
)

// Message is one message to publish. Persistent messages survive a broker
// restart; Mandatory ones come back as ErrReturned when unroutable.
type Message struct {
	Exchange    string
	RoutingKey  string
	MessageID   string
	Type        string
	ContentType string
	Timestamp   time.Time
	Headers     map[string]any
	Body        []byte
	Mandatory   bool
	Persistent  bool
}

// Publisher publishes on its own channel in confirm mode. It is not safe
// for concurrent use.
type Publisher struct {
	// seq numbers this publisher's messages for matching basic.return.
	seq     uint64
	conn    *Conn
	ch      *amqp.Channel
	returns chan amqp.Return
	closed  <-chan error
}

// NewPublisher opens a channel on conn and puts it in confirm mode.
func NewPublisher(conn *Conn) (*Publisher, error) {
	p := &Publisher{conn: conn}
	if err := p.open(); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Publisher) open() error {
	ch, err := p.conn.c.Channel()
	if err != nil {
		return fmt.Errorf("open publish channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		ch.Close()
		return fmt.Errorf("enable publisher confirms: %w", err)
	}
	p.ch = ch
	p.returns = ch.NotifyReturn(make(chan amqp.Return, MaxBatch))
	p.closed = closedErrors(ch.NotifyClose(make(chan *amqp.Error, 1)))
	return nil
}

// Reopen replaces the channel, typically after the broker closed it with a
// channel-level error (a publish to a missing exchange closes the channel,
// not the connection), by a new one in confirm mode on the same
// connection. Confirms still pending on the old channel resolve as
// ErrChannelClosed. It returns an error when the connection is closed.
func (p *Publisher) Reopen() error {
	_ = p.ch.Close()
	return p.open()
}

// IsClosed reports whether the channel is closed.
func (p *Publisher) IsClosed() bool { return p.ch.IsClosed() }

// DeclareExchange declares a durable exchange of kind ("topic", "direct",
// ...) idempotently. A mismatch with an existing exchange closes the
// channel (Reopen it) and returns the broker's error.
func (p *Publisher) DeclareExchange(name, kind string) error {
	if err := p.ch.ExchangeDeclare(name, kind, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare exchange %s: %w", name, err)
	}
	return nil
}

// DeclareBoundQueue declares a durable queue idempotently and binds it to
// exchange with key. A mismatch with an existing queue closes the channel
// (Reopen it) and returns the broker's error.
func (p *Publisher) DeclareBoundQueue(queue, exchange, key string) error {
	if _, err := p.ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare queue %s: %w", queue, err)
	}
	if err := p.ch.QueueBind(queue, key, exchange, false, nil); err != nil {
		return fmt.Errorf("bind queue %s to %s: %w", queue, exchange, err)
	}
	return nil
}

// Closed receives the broker's reason when the broker closes the channel,
// and is closed without a value afterwards or when the client closed it.
func (p *Publisher) Closed() <-chan error { return p.closed }

// Close closes the channel.
func (p *Publisher) Close() error { return p.ch.Close() }

// Publish publishes one message and waits for its confirm until ctx is
// done. It returns nil only for a real broker ack of a routed message.
func (p *Publisher) Publish(ctx context.Context, m Message) error {
	return p.PublishBatch(ctx, []Message{m})[0]
}

// PublishBatch publishes msgs (at most MaxBatch) with deferred confirms and
// waits for every confirm until ctx is done. It returns one error per
// message, nil only for a real broker ack of a message that was not
// returned. A confirm that never came (deadline) or came empty because the
// channel closed is an error, never an ack.
func (p *Publisher) PublishBatch(ctx context.Context, msgs []Message) []error {
	errs := make([]error, len(msgs))
	if len(msgs) > MaxBatch {
		for i := range errs {
			errs[i] = fmt.Errorf("batch of %d exceeds %d", len(msgs), MaxBatch)
		}
		return errs
	}
	p.drainReturns() // returns of an earlier, timed-out batch
	confs := make([]*amqp.DeferredConfirmation, len(msgs))
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		p.seq++
		ids[i] = fmt.Sprintf("%p-%d", p, p.seq)
		pub := m.publishing(PublishIDHeader, ids[i])
		c, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, m.Exchange, m.RoutingKey, m.Mandatory, false, pub)
		if err != nil {
			errs[i] = fmt.Errorf("publish: %w", err)
			continue
		}
		confs[i] = c
	}
	for i, c := range confs {
		if c == nil {
			continue
		}
		errs[i] = p.wait(ctx, c)
	}
	returned := p.drainReturns()
	for i := range msgs {
		if errs[i] == nil && returned[ids[i]] {
			errs[i] = ErrReturned
		}
	}
	return errs
}

// PublishIDHeader is the header by which a Publisher matches a basic.return
// to the message it published, whatever the message's own message_id (which
// may be empty, or shared by two messages).
const PublishIDHeader = "x-mailsvc-publish-id"

func (p *Publisher) wait(ctx context.Context, c *amqp.DeferredConfirmation) error {
	ack, err := c.WaitContext(ctx)
	switch {
	case err != nil:
		return ErrConfirmTimeout
	case ack:
		return nil
	case p.ch.IsClosed():
		return ErrChannelClosed
	default:
		return ErrNacked
	}
}

// drainReturns reads every basic.return already received. RabbitMQ sends
// basic.return before the basic.ack of the same message, and amqp091-go
// delivers it to the buffered channel before it records the ack, so after
// the confirms every return of the batch is already buffered.
func (p *Publisher) drainReturns() map[string]bool {
	got := map[string]bool{}
	for {
		select {
		case r, ok := <-p.returns:
			if !ok {
				return got
			}
			if id, ok := r.Headers[PublishIDHeader].(string); ok {
				got[id] = true
			}
		default:
			return got
		}
	}
}

// publishing is m for amqp091-go, its headers copied (m.Headers is not
// modified) with key set to v.
func (m Message) publishing(key string, v any) amqp.Publishing {
	h := toTable(m.Headers, 1)
	h[key] = v
	mode := amqp.Transient
	if m.Persistent {
		mode = amqp.Persistent
	}
	return amqp.Publishing{
		Headers: h, ContentType: m.ContentType, DeliveryMode: mode,
		MessageId: m.MessageID, Type: m.Type, Timestamp: m.Timestamp, Body: m.Body,
	}
}

// PublishHint wraps a publish error with what an operator can do about
// it: a returned message means no queue is bound for its routing key, a
// channel the broker closed usually means the exchange does not exist.
// Other errors come back as they are.
func PublishHint(err error) error {
	switch {
	case errors.Is(err, ErrReturned):
		return fmt.Errorf("%w: no queue is bound for that routing key (is the topology declared? `mailsvc serve` declares it)", err)
	case errors.Is(err, ErrChannelClosed):
		return fmt.Errorf("%w: does the exchange exist? (`mailsvc serve` declares it)", err)
	}
	return err
}
