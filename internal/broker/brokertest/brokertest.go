// Package brokertest gives each test its own RabbitMQ names (exchanges and
// queues with a random prefix) on the real broker and deletes them when the
// test ends.
package brokertest

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/mailsvc/mailsvc/internal/broker"

	"github.com/mailsvc/mailsvc/internal/testenv"
)

// DefaultURL is the test broker used when MAILSVC_TEST_AMQP_URL is unset.
const DefaultURL = "amqp://guest:guest@127.0.0.1:5672/"

// URL returns the test broker's URL.
func URL() string {
	if u := os.Getenv("MAILSVC_TEST_AMQP_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// Names are one test's exchange and queue names, all starting with Prefix.
type Names struct {
	Prefix             string
	InputExchange      string
	Queue              string
	DeadLetterExchange string
	DeadLetterQueue    string
	EventsExchange     string
	// EventsQueue is a queue a test may bind to EventsExchange to read
	// feedback events.
	EventsQueue string
}

// New returns fresh names and registers the deletion of every exchange and
// queue with those names (and any extra ones given to Track) in t.Cleanup.
// An unreachable broker fails the test with a message that says how to
// start it.
func New(t testing.TB) *Names {
	t.Helper()
	Dial(t).Close()
	p := "t." + randomHex(6) + "."
	n := &Names{
		Prefix: p, InputExchange: p + "order.events", Queue: p + "mail.order-events",
		DeadLetterExchange: p + "mail.dlx", DeadLetterQueue: p + "mail.order-events.dlq",
		EventsExchange: p + "mail.events", EventsQueue: p + "events-observer",
	}
	t.Cleanup(func() { n.delete(t) })
	return n
}

func (n *Names) delete(t testing.TB) {
	conn, err := amqp.DialConfig(URL(), amqp.Config{Properties: amqp.Table{"connection_name": "brokertest-cleanup"}})
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	defer conn.Close()
	for _, q := range []string{n.Queue, n.DeadLetterQueue, n.EventsQueue} {
		if ch, err := conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(q, false, false, false)
			ch.Close()
		}
	}
	for _, x := range []string{n.InputExchange, n.DeadLetterExchange, n.EventsExchange} {
		if ch, err := conn.Channel(); err == nil {
			_ = ch.ExchangeDelete(x, false, false)
			ch.Close()
		}
	}
}

// Dial connects to the test broker or fails the test with how to start it.
// The caller closes the connection.
func Dial(t testing.TB) *broker.Conn {
	t.Helper()
	testenv.NeedsServer(t, "RabbitMQ")
	conn, err := broker.Dial(broker.Config{URL: URL(), Name: "mailsvc-test"})
	if err != nil {
		t.Fatalf("RabbitMQ at %s is unreachable: %v\nstart it with `make services` (scripts/services.sh), or set MAILSVC_TEST_AMQP_URL", URL(), err)
	}
	return conn
}

// DialRaw is Dial with an amqp091-go connection, for the end-to-end tests
// only: they play the order service and the readers of mail.events as
// outside clients would, without mailsvc's code. Every other test goes
// through broker and the helpers of this package.
func DialRaw(t testing.TB) *amqp.Connection {
	t.Helper()
	testenv.NeedsServer(t, "RabbitMQ")
	conn, err := amqp.DialConfig(URL(), amqp.Config{Properties: amqp.Table{"connection_name": "mailsvc-test"}})
	if err != nil {
		t.Fatalf("RabbitMQ at %s is unreachable: %v\nstart it with `make services` (scripts/services.sh), or set MAILSVC_TEST_AMQP_URL", URL(), err)
	}
	return conn
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
