package consumer

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/mailsvc/mailsvc/internal/broker"
	"github.com/mailsvc/mailsvc/internal/deadletter"
)

// Topology is what the consumer declares: the dead-letter exchange
// (topic, durable) and queue (quorum, with deadletter.QueueDeliveryLimit
// and MaxDeadLetterQueueLength) bound with deadletter.BindingKey, then the
// input exchange (topic, durable) and queue (quorum with c.DeliveryLimit
// and c.MaxQueueLength, dead-lettering at-least-once to
// c.DeadLetterExchange; see broker.Queue) bound with every binding key of
// c. With c.LimitsByPolicy the length limits are left to a policy.
//
// Changing a queue's settings on an existing queue makes the declaration
// fail: DeclareTopology says what to do.
func Topology(c Config) broker.Topology {
	c = c.WithDefaults() // a zero length limit is the default one, as the consumer declares it
	input, dead := c.MaxQueueLength, c.MaxDeadLetterQueueLength
	if c.LimitsByPolicy {
		input, dead = 0, 0
	}
	return broker.Topology{
		{
			Exchange:    c.DeadLetterExchange,
			Queue:       broker.Queue{Name: c.DeadLetterQueue, DeliveryLimit: deadletter.QueueDeliveryLimit, MaxLength: dead},
			BindingKeys: []string{deadletter.BindingKey},
		},
		{
			Exchange:    c.InputExchange,
			Queue:       broker.Queue{Name: c.Queue, DeliveryLimit: c.DeliveryLimit, DeadLetterExchange: c.DeadLetterExchange, MaxLength: input},
			BindingKeys: c.BindingKeys,
		},
	}
}

// DeclareTopology declares Topology(c) on conn, idempotently. The consumer
// calls it at every (re)connect when c.DeclareTopology is set. It returns
// the broker's error; when a queue or exchange exists with other settings
// (a *broker.MismatchError) the error says what to run or change. The
// consumer stops on it (broker.Supervise does not retry it).
func DeclareTopology(conn *broker.Conn, c Config) error {
	err := conn.Declare(Topology(c))
	var me *broker.MismatchError
	if errors.As(err, &me) {
		return fmt.Errorf("%w\n%s", err, mismatchHint(c, me))
	}
	return err
}

// isLimitArg reports whether arg is one the length limits add.
func isLimitArg(arg string) bool { return arg == "x-max-length" || arg == "x-overflow" }

// mismatchHint says what an operator can do about a declaration the broker
// refused because the queue exists with other arguments.
func mismatchHint(c Config, me *broker.MismatchError) string {
	key, limit := "amqp.max_queue_length", c.MaxQueueLength
	if me.Name == c.DeadLetterQueue {
		key, limit = "amqp.max_dead_letter_queue_length", c.MaxDeadLetterQueueLength
	}
	switch {
	case me.Kind != "queue" || !isLimitArg(me.Arg):
		return "Re-create it with the settings of this config, or set amqp.declare_topology: false and manage the topology yourself."
	case me.Current == "" && !c.LimitsByPolicy:
		return fmt.Sprintf(`Queue %s was declared without a length limit (by an earlier mailsvc, or by hand), and RabbitMQ never changes the arguments of an existing queue. Either keep both queues and set their limits with policies, then set amqp.queue_limits: policy:
%s
or drain and delete the queues when nothing publishes, so that mailsvc declares them with the limits (docs/runbook.md, "Upgrading to bounded queues").`, me.Name, PolicyCommands(c))
	case me.Received == "" && c.LimitsByPolicy:
		return fmt.Sprintf("Queue %s has %s=%s as an argument, so its limits do not come from a policy: set amqp.queue_limits: arguments (and %s to match it).", me.Name, me.Arg, me.Current, key)
	default:
		return fmt.Sprintf("Queue %s was declared with %s=%s and %s is %d; a queue argument never changes. Set %s back to %s, or re-create the queue (a policy's max-length applies only where it is lower than the argument).",
			me.Name, me.Arg, me.Current, key, limit, key, me.Current)
	}
}

// PolicyCommands returns the rabbitmqctl lines that set the length limits
// of c's two queues by policy, one line each: policy mailsvc-limits-QUEUE,
// matching exactly that queue, with max-length and overflow
// reject-publish, priority 10. RabbitMQ applies one policy per queue (the
// highest priority): where one of yours already matches, add the two keys
// to it instead.
func PolicyCommands(c Config) string {
	vhost := broker.Vhost(c.URL)
	line := func(queue string, length int) string {
		return fmt.Sprintf("  rabbitmqctl set_policy --vhost %s --apply-to queues --priority 10 %s %s %s",
			shellQuote(vhost), shellQuote("mailsvc-limits-"+queue), shellQuote("^"+regexp.QuoteMeta(queue)+"$"),
			shellQuote(fmt.Sprintf(`{"max-length":%d,"overflow":"reject-publish"}`, length)))
	}
	return line(c.Queue, c.MaxQueueLength) + "\n" + line(c.DeadLetterQueue, c.MaxDeadLetterQueueLength)
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
