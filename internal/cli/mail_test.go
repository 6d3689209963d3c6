package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// opsEnv is what an operator-command test runs against: its own schema,
// its own broker names and a config file pointing at both.
type opsEnv struct {
	sc     *storetest.Schema
	names  *brokertest.Names
	config string
}

func newOpsEnv(t *testing.T, extraYAML string) *opsEnv {
	t.Helper()
	sc := storetest.New(t)
	names := brokertest.New(t)
	return &opsEnv{sc: sc, names: names, config: writeOpsConfig(t, sc.URL, brokertest.URL(), names, extraYAML)}
}

// writeOpsConfig writes a config file and returns its path. extraYAML
// holds more sections; lines of it indented by two spaces after a line
// "amqp:" are added to the amqp section instead.
func writeOpsConfig(t *testing.T, dbURL, amqpURL string, n *brokertest.Names, extraYAML string) string {
	t.Helper()
	extraAMQP := ""
	if rest, ok := strings.CutPrefix(extraYAML, "amqp:\n"); ok {
		lines := strings.SplitAfter(rest, "\n")
		i := 0
		for i < len(lines) && strings.HasPrefix(lines[i], "  ") {
			extraAMQP += lines[i]
			i++
		}
		extraYAML = strings.Join(lines[i:], "")
	}
	y := fmt.Sprintf(`database:
  url: %q
amqp:
  url: %q
  input_exchange: %q
  queue: %q
  dead_letter_exchange: %q
  dead_letter_queue: %q
  events_exchange: %q
%smail:
  from: "Shop <orders@shop.example>"
%s`, dbURL, amqpURL, n.InputExchange, n.Queue, n.DeadLetterExchange, n.DeadLetterQueue, n.EventsExchange, extraAMQP, extraYAML)
	p := filepath.Join(t.TempDir(), "mailsvc.yaml")
	require.NoError(t, os.WriteFile(p, []byte(y), 0o600))
	return p
}

// run executes the command line with the env's config; it returns stdout
// and the error.
func (o *opsEnv) run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return runCLI(t, o.config, args...)
}

func runCLI(t *testing.T, config string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	err := Execute(ctx, append([]string{"--config", config}, args...), &out, &errOut)
	return out.String(), err
}

// seed inserts a mail with content in status st.
func (o *opsEnv) seed(t *testing.T, key, orderID string, st mailtype.Status) {
	t.Helper()
	o.sc.Exec(t, `INSERT INTO mail (event_id, dedupe_key, order_id, template, locale, to_email, payload,
		subject, body_text, body_html, message_id, status, attempts, provider, provider_message_id, last_error,
		last_error_class, sent_at)
		VALUES (gen_random_uuid(), $1, $2, 'order_confirmed', 'vi', 'b@example.com', '{}',
		'Xác nhận đơn hàng', 'text', '<p>html</p>', $3, $4, 1, 'smtp', 'pm-7', 'timeout (ambiguous): reset after DATA',
		'ambiguous', CASE WHEN $4 = 'sent' THEN now() END)`, key, orderID, mailtype.MessageID(key, "shop.example"), string(st))
}

func TestMailShow(t *testing.T) {
	t.Parallel()
	o := newOpsEnv(t, "")
	o.seed(t, "order-confirmed:42", "42", mailtype.StatusUnknown)
	o.sc.Exec(t, `INSERT INTO mail (dedupe_key, order_id, template, status, cancel_event_id) VALUES ('order-cancelled-x', '42', 'order_confirmed', 'cancelled', gen_random_uuid())`)

	out, err := o.run(t, "mail", "show", "order-confirmed:42")
	require.NoError(t, err)
	for _, want := range []string{"dedupe_key:", "order-confirmed:42", "status:", "unknown", "mail reconcile order-confirmed:42",
		"attempts:", "smtp pm-7", "last_error:", "timeout (ambiguous)", "feedback:", "none written", "to:", "b@example.com"} {
		require.Contains(t, out, want)
	}

	out, err = o.run(t, "mail", "show", "order-confirmed:42", "--json")
	require.NoError(t, err)
	var one store.MailView
	require.NoError(t, json.Unmarshal([]byte(out), &one))
	require.Equal(t, mailtype.StatusUnknown, one.Status)
	require.Equal(t, "pm-7", one.ProviderMessageID)
	require.Equal(t, mailtype.Ambiguous, one.LastErrorClass)

	// The verdict reads the stored class: a cancelled mail whose last send
	// was ambiguous may have been delivered, whatever last_error says.
	o.seed(t, "order-confirmed:43", "43", mailtype.StatusCancelled)
	out, err = o.run(t, "mail", "show", "order-confirmed:43")
	require.NoError(t, err)
	require.Contains(t, out, "cancelled, but the outcome of the last send is unknown")
	o.sc.Exec(t, `UPDATE mail SET last_error_class = 'transient' WHERE dedupe_key = 'order-confirmed:43'`)
	out, err = o.run(t, "mail", "show", "order-confirmed:43")
	require.NoError(t, err)
	require.Contains(t, out, "not sent: the order was cancelled\n")
	require.NotContains(t, out, "outcome of the last send is unknown")

	out, err = o.run(t, "mail", "show", "--order", "42", "--json")
	require.NoError(t, err)
	var all []store.MailView
	require.NoError(t, json.Unmarshal([]byte(out), &all))
	require.Len(t, all, 2)
	require.Equal(t, "order-cancelled-x", all[1].DedupeKey)

	out, err = o.run(t, "mail", "show", "--order", "42")
	require.NoError(t, err)
	require.Contains(t, out, "tombstone")

	_, err = o.run(t, "mail", "show", "order-confirmed:404")
	require.Equal(t, ExitNotFound, ExitCode(err))
	require.ErrorContains(t, err, `no mail has dedupe key "order-confirmed:404"`)
	_, err = o.run(t, "mail", "show", "--order", "404")
	require.Equal(t, ExitNotFound, ExitCode(err))
	_, err = o.run(t, "mail", "show", "order-confirmed:42", "--order", "42")
	require.ErrorContains(t, err, "exactly one")
	_, err = o.run(t, "mail", "show")
	require.ErrorContains(t, err, "exactly one")
}

func TestMailResend(t *testing.T) {
	t.Parallel()
	o := newOpsEnv(t, "")
	o.seed(t, "order-confirmed:1", "1", mailtype.StatusFailed)
	o.seed(t, "order-confirmed:2", "2", mailtype.StatusPending)

	out, err := o.run(t, "mail", "resend", "order-confirmed:1")
	require.NoError(t, err)
	require.Contains(t, out, "created order-confirmed:1:resend:1 (pending)")
	require.EqualValues(t, 1, o.sc.QueryInt(t, `SELECT count(*) FROM mail WHERE dedupe_key = 'order-confirmed:1:resend:1'
		AND status = 'pending' AND message_id = $1`, mailtype.MessageID("order-confirmed:1:resend:1", "shop.example")))
	require.EqualValues(t, 1, o.sc.QueryInt(t, `SELECT count(*) FROM mail WHERE dedupe_key = 'order-confirmed:1' AND status = 'failed' AND attempts = 1`))

	// The first resend is still pending: a second one is refused.
	_, err = o.run(t, "mail", "resend", "order-confirmed:1")
	require.Equal(t, ExitRefused, ExitCode(err))
	require.ErrorContains(t, err, "order-confirmed:1:resend:1")

	_, err = o.run(t, "mail", "resend", "order-confirmed:2")
	require.Equal(t, ExitRefused, ExitCode(err))
	require.ErrorContains(t, err, "it is pending")

	_, err = o.run(t, "mail", "resend", "nope")
	require.Equal(t, ExitNotFound, ExitCode(err))
	require.EqualValues(t, 3, o.sc.QueryInt(t, `SELECT count(*) FROM mail`))
}

func TestMailReconcile(t *testing.T) {
	t.Parallel()
	o := newOpsEnv(t, "")
	o.seed(t, "order-confirmed:1", "1", mailtype.StatusUnknown)
	o.seed(t, "order-confirmed:2", "2", mailtype.StatusUnknown)
	o.seed(t, "order-confirmed:3", "3", mailtype.StatusSent)

	out, err := o.run(t, "mail", "reconcile", "order-confirmed:1", "--delivered")
	require.NoError(t, err)
	require.Equal(t, "order-confirmed:1 is now sent; EmailSent written to the outbox\n", out)
	require.EqualValues(t, 1, o.sc.QueryInt(t, `SELECT count(*) FROM outbox WHERE dedupe_key = 'order-confirmed:1' AND event_type = 'EmailSent'`))

	out, err = o.run(t, "mail", "reconcile", "order-confirmed:2", "--not-delivered")
	require.NoError(t, err)
	require.Contains(t, out, "order-confirmed:2 is now pending")
	require.EqualValues(t, 1, o.sc.QueryInt(t, `SELECT count(*) FROM mail WHERE dedupe_key = 'order-confirmed:2' AND status = 'pending'`))

	for _, key := range []string{"order-confirmed:1", "order-confirmed:2", "order-confirmed:3"} {
		_, err = o.run(t, "mail", "reconcile", key, "--delivered")
		require.Equal(t, ExitRefused, ExitCode(err), key)
		require.ErrorContains(t, err, "only unknown mails are reconciled")
	}
	_, err = o.run(t, "mail", "reconcile", "nope", "--not-delivered")
	require.Equal(t, ExitNotFound, ExitCode(err))
	_, err = o.run(t, "mail", "reconcile", "order-confirmed:1")
	require.Error(t, err)
	_, err = o.run(t, "mail", "reconcile", "order-confirmed:1", "--delivered", "--not-delivered")
	require.Error(t, err)
	require.EqualValues(t, 1, o.sc.QueryInt(t, `SELECT count(*) FROM outbox`))
}

func TestMailCommandsReportAnUnreachableDatabase(t *testing.T) {
	t.Parallel()
	names := brokertest.New(t)
	// A closed port, and a password that must not be printed.
	cfg := writeOpsConfig(t, "postgres://postgres:pw-Secret-123@127.0.0.1:1/test?sslmode=disable", brokertest.URL(), names, "")
	for _, args := range [][]string{{"mail", "show", "k"}, {"mail", "resend", "k"}, {"mail", "reconcile", "k", "--delivered"}} {
		_, err := runCLI(t, cfg, args...)
		require.Equal(t, ExitUnavailable, ExitCode(err), args)
		require.ErrorContains(t, err, "database postgres://postgres:xxxxx@127.0.0.1:1/test")
		require.ErrorContains(t, err, "check database.url")
		require.NotContains(t, err.Error(), "pw-Secret-123")
	}
}

func TestMailCommandsRefuseABehindSchema(t *testing.T) {
	t.Parallel()
	sc := storetest.NewEmpty(t)
	cfg := writeOpsConfig(t, sc.URL, brokertest.URL(), brokertest.New(t), "")
	_, err := runCLI(t, cfg, "mail", "show", "k")
	require.Equal(t, ExitUnavailable, ExitCode(err))
	require.ErrorIs(t, err, store.ErrSchemaBehind)
	require.True(t, strings.Contains(err.Error(), "mailsvc migrate"))
}
