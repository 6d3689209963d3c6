// Command consumer keeps a per-order projection of mailsvc's feedback
// events (package projection) in a JSON file, as an order service would in
// its database. It declares a durable queue bound to the mail.events topic
// exchange with email.#, takes one message at a time, applies it, writes
// the state (projection and the event ids already applied) to the file,
// and only then acks: a crash between the write and the ack redelivers the
// message, whose event_id the state already holds, so nothing is counted
// twice. A body that is not an event is rejected without requeue.
//
// Environment: AMQP_URL (default amqp://guest:guest@127.0.0.1:5672/),
// EVENTS_EXCHANGE (default mail.events), QUEUE (default
// order-service.mail-events), STATE (default mail-status.json). It prints
// "ready" on stdout once its queue is bound, and runs until SIGINT or
// SIGTERM.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/mailsvc/mailsvc/examples/go/projection"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		os.Exit(1)
	}
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func run() error {
	statePath := env("STATE", "mail-status.json")
	state, err := load(statePath)
	if err != nil {
		return err
	}
	conn, err := amqp.Dial(env("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"))
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	exchange, queue := env("EVENTS_EXCHANGE", "mail.events"), env("QUEUE", "order-service.mail-events")
	if err := ch.ExchangeDeclare(exchange, "topic", true, false, false, false, nil); err != nil {
		return err
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		return err
	}
	if err := ch.QueueBind(queue, "email.#", exchange, false, nil); err != nil {
		return err
	}
	if err := ch.Qos(1, 0, false); err != nil {
		return err
	}
	deliveries, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		return err
	}
	fmt.Println("ready")
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	for {
		select {
		case <-stop:
			return nil
		case err := <-closed:
			return fmt.Errorf("connection closed: %v", err)
		case d := <-deliveries:
			if err := handle(state, statePath, d); err != nil {
				return err
			}
		}
	}
}

// handle applies one delivery, writes the state, then acks.
func handle(state *projection.State, path string, d amqp.Delivery) error {
	if _, err := state.Apply(d.Body); err != nil {
		fmt.Fprintf(os.Stderr, "consumer: rejecting message %s: %v\n", d.MessageId, err)
		return d.Reject(false)
	}
	if err := save(state, path); err != nil {
		return err // not acked: redelivered after a restart
	}
	return d.Ack(false)
}

func load(path string) (*projection.State, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return projection.New(), nil
	}
	if err != nil {
		return nil, err
	}
	s := projection.New()
	if err := json.Unmarshal(b, s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// save writes the state to a temporary file and renames it over path, so
// that a reader never sees half a file.
func save(s *projection.State, path string) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
