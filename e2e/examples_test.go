package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"github.com/mailsvc/mailsvc/internal/e2etest"
	"github.com/mailsvc/mailsvc/internal/testenv"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
)

// exampleMail is the part of an example consumer's projection of one mail
// (examples/go/projection, examples/node/projection.js) the test checks;
// last_event_id is left out, being a fresh UUID each run.
type exampleMail struct {
	Template      string `json:"template"`
	Revision      int    `json:"revision"`
	Status        string `json:"status"`
	Attempts      int    `json:"attempts"`
	Provider      string `json:"provider"`
	CancelTooLate bool   `json:"cancel_too_late"`
	Complained    bool   `json:"complained"`
}

type exampleState struct {
	Orders     map[string]map[string]exampleMail `json:"orders"`
	Applied    int                               `json:"applied"`
	Duplicates int                               `json:"duplicates"`
}

// exampleCommands are the argv prefixes of one language's producer and
// consumer.
type exampleCommands struct{ producer, consumer []string }

// TestExamples runs the order-service examples of examples/ (Go and
// Node.js) against the real broker and a running mailsvc, so that they
// cannot rot: the example producer publishes the events, mailsvc sends the
// mails to Mailpit, and the example consumer's projection of mail.events
// must hold exactly the statuses the contract promises.
func TestExamples(t *testing.T) {
	t.Parallel()
	testenv.NeedsServer(t, "RabbitMQ, PostgreSQL and a running mailsvc")
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", dir, "./producer", "./consumer")
	build.Dir = "../examples/go"
	out, err := build.CombinedOutput()
	require.NoError(t, err, "build examples/go: %s", out)
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is missing: run `make examples-node` (scripts/examples-node.sh installs Debian's nodejs and npm)")
	}
	if _, err := os.Stat("../examples/node/node_modules/amqplib/package.json"); err != nil {
		t.Fatal("examples/node has no node_modules: run `make examples-node` (npm ci from the committed package-lock.json)")
	}
	for name, c := range map[string]exampleCommands{
		"go":   {producer: []string{filepath.Join(dir, "producer")}, consumer: []string{filepath.Join(dir, "consumer")}},
		"node": {producer: []string{node, "../examples/node/producer.js"}, consumer: []string{node, "../examples/node/consumer.js"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			runExample(t, c)
		})
	}
}

func runExample(t *testing.T, c exampleCommands) {
	mp := startMailpit(t)
	s := e2etest.NewStack(t, mp.SMTPAddr)
	_, err := s.CLI("migrate")
	require.NoError(t, err)
	p := s.Serve(nil)
	obs := brokertest.Observe(t, s.Names.EventsExchange, s.Names.Prefix+"examples-observer", "#")
	queue := s.Names.Prefix + "order-service.mail-events"
	t.Cleanup(func() { brokertest.DeleteQueue(t, queue) })
	state := filepath.Join(t.TempDir(), "mail-status.json")
	env := append(os.Environ(), "AMQP_URL="+brokertest.URL(), "ORDER_EXCHANGE="+s.Names.InputExchange,
		"EVENTS_EXCHANGE="+s.Names.EventsExchange, "QUEUE="+queue, "STATE="+state)
	startExampleConsumer(t, c.consumer, env)

	produce := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(c.producer[0], append(slices.Clone(c.producer[1:]), args...)...)
		cmd.Env = env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		require.NoError(t, cmd.Run(), "producer %v: %s", args, stderr.String())
		var ev struct {
			EventID string `json:"event_id"`
		}
		require.NoError(t, json.Unmarshal(stdout.Bytes(), &ev), "producer printed %q", stdout.String())
		return ev.EventID
	}
	read := func() exampleState {
		var st exampleState
		if b, err := os.ReadFile(state); err == nil {
			require.NoError(t, json.Unmarshal(b, &st))
		}
		return st
	}

	// 1001: confirmed, and the same event published again (a producer's
	// retry): one mail.
	id := produce("--kind", "confirmed", "--order", "1001", "--email", "c1001@example.com", "--name", "Jane Doe")
	produce("--kind", "confirmed", "--order", "1001", "--email", "c1001@example.com", "--name", "Jane Doe", "--event-id", id)
	// 1002: confirmed, sent, then cancelled: too late, and a cancellation notice.
	produce("--kind", "confirmed", "--order", "1002", "--email", "c1002@example.com")
	require.Eventually(t, func() bool { return read().Orders["1002"]["order-confirmed:1002"].Status == "sent" },
		time.Minute, 50*time.Millisecond, "order 1002's EmailSent never reached the example consumer")
	produce("--kind", "cancelled", "--order", "1002")
	// 1003: cancelled before any confirmation (a tombstone), then reopened
	// and confirmed again as revision 2, whose key is its own.
	produce("--kind", "cancelled", "--order", "1003")
	produce("--kind", "confirmed", "--order", "1003", "--revision", "2", "--email", "c1003@example.com")

	sent := func(template string, revision int, tooLate bool) exampleMail {
		return exampleMail{Template: template, Revision: revision, Status: "sent", Attempts: 1, Provider: "smtp", CancelTooLate: tooLate}
	}
	want := exampleState{Applied: 6, Orders: map[string]map[string]exampleMail{
		"1001": {"order-confirmed:1001": sent("order_confirmed", 1, false)},
		"1002": {"order-confirmed:1002": sent("order_confirmed", 1, true), "order-cancelled:1002": sent("order_cancelled", 1, false)},
		"1003": {
			"order-confirmed:1003":    {Template: "order_confirmed", Revision: 1, Status: "cancelled"},
			"order-confirmed:1003:r2": sent("order_confirmed", 2, false),
		},
	}}
	require.Eventually(t, func() bool { return read().Applied >= want.Applied }, time.Minute, 50*time.Millisecond,
		"the example consumer applied fewer than %d events", want.Applied)
	require.Equal(t, want, read())

	// A redelivered feedback event (the same message_id and body) changes
	// nothing and is counted as a duplicate.
	var first *amqp.Publishing
	var key string
	for _, d := range obs.WaitFor(t, want.Applied) {
		if d.Type == "EmailSent" {
			first, key = &amqp.Publishing{ContentType: d.ContentType, DeliveryMode: amqp.Persistent, MessageId: d.MessageID, Type: d.Type, Body: d.Body}, d.RoutingKey
			break
		}
	}
	require.NotNil(t, first)
	republish(t, s.Names.EventsExchange, key, *first)
	want.Duplicates = 1
	require.Eventually(t, func() bool { return read().Duplicates == 1 }, 30*time.Second, 50*time.Millisecond)
	require.Equal(t, want, read())

	var to []string
	for _, m := range mp.messages(t) {
		for _, a := range m.To {
			to = append(to, a.Address)
		}
	}
	slices.Sort(to)
	require.Equal(t, []string{"c1001@example.com", "c1002@example.com", "c1002@example.com", "c1003@example.com"}, to,
		"one mail per order and revision, one cancellation notice, nothing for the tombstone")
	p.Stop(t, 30*time.Second)
}

// startExampleConsumer starts an example consumer and waits for its
// "ready" line (its queue is bound); the test's end stops it.
func startExampleConsumer(t *testing.T, argv []string, env []string) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	logs := &e2etest.SyncBuffer{}
	cmd.Stderr = logs
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "ready" {
				close(ready)
			}
		}
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("example consumer %v stderr:\n%s", argv, logs.String())
		}
	})
	select {
	case <-ready:
	case <-exited:
		t.Fatalf("example consumer %v exited at start:\n%s", argv, logs.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("example consumer %v not ready within 30 s:\n%s", argv, logs.String())
	}
}

// republish publishes msg to exchange with routing key, with confirms.
func republish(t *testing.T, exchange, key string, msg amqp.Publishing) {
	t.Helper()
	conn := brokertest.DialRaw(t)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.Confirm(false))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, true, false, msg)
	require.NoError(t, err)
	ok, err := c.WaitContext(ctx)
	require.NoError(t, err)
	require.True(t, ok)
}
