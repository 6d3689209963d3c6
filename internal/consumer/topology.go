package consumer

import (
	"errors"
	"fmt"

	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/deadletter"
)

// Topology is what the consumer declares: the dead-letter exchange
// (topic, durable) and queue (quorum, with deadletter.QueueDeliveryLimit)
// bound with deadletter.BindingKey, then the input exchange (topic,
// durable) and queue (quorum with c.DeliveryLimit, dead-lettering
// at-least-once to c.DeadLetterExchange; see broker.Queue) bound with
// every binding key of c.
//
// Changing a queue's settings on an existing queue makes the declaration
// fail: delete and re-create the queue, or manage it with a policy and set
// amqp.declare_topology to false.
func Topology(c Config) broker.Topology {
	return broker.Topology{
		{
			Exchange:    c.DeadLetterExchange,
			Queue:       broker.Queue{Name: c.DeadLetterQueue, DeliveryLimit: deadletter.QueueDeliveryLimit},
			BindingKeys: []string{deadletter.BindingKey},
		},
		{
			Exchange:    c.InputExchange,
			Queue:       broker.Queue{Name: c.Queue, DeliveryLimit: c.DeliveryLimit, DeadLetterExchange: c.DeadLetterExchange},
			BindingKeys: c.BindingKeys,
		},
	}
}

// DeclareTopology declares Topology(c) on conn, idempotently. The consumer
// calls it at every (re)connect when c.DeclareTopology is set. It returns
// the broker's error, explained when a queue or exchange exists with other
// settings.
func DeclareTopology(conn *broker.Conn, c Config) error {
	err := conn.Declare(Topology(c))
	if errors.Is(err, broker.ErrTopologyMismatch) {
		return fmt.Errorf("%w (re-create it, or set amqp.declare_topology false)", err)
	}
	return err
}
