package cli

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/broker/brokertest"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/store/storetest"
)

// An operator sees the dead feedback events and revives them without SQL:
// list shows them with their last error, replay --dead makes them alive
// and due, and a second replay finds nothing.
func TestOutboxListAndReplay(t *testing.T) {
	t.Parallel()
	o := newOpsEnv(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fb := func(order string) store.Feedback {
		return store.Feedback{Type: mailtype.EmailSent, DedupeKey: mailtype.ConfirmationKey(order), OrderID: order,
			Template: "order_confirmed", Status: mailtype.StatusSent, Attempts: 1, Provider: "smtp"}
	}
	require.NoError(t, storetest.InsertOutbox(ctx, o.sc.Store, fb("41"), fb("42"), fb("43")))
	o.sc.Exec(t, `UPDATE outbox SET dead_at = now(), attempts = 10,
		last_error = 'unroutable: broker returned the publish as unroutable (exchange "mail.events", routing key "email.sent")'
		WHERE order_id IN ('41', '42')`)
	o.sc.Exec(t, `UPDATE outbox SET published_at = now() WHERE order_id = '43'`)

	out, err := o.run(t, "outbox", "list", "--dead")
	require.NoError(t, err)
	for _, want := range []string{"ID", "STATE", "LAST_ERROR", "dead", "EmailSent", "order-confirmed:41", "order-confirmed:42",
		`unroutable: broker returned the publish as unroutable (exchange "mail.events", routing key "email.sent")`, "2 dead outbox rows\n"} {
		require.Contains(t, out, want)
	}
	require.NotContains(t, out, "order-confirmed:43")

	out, err = o.run(t, "outbox", "list", "--json")
	require.NoError(t, err)
	var rows []store.OutboxEntry
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	require.Len(t, rows, 2, "unpublished rows only")
	require.Equal(t, "order-confirmed:41", rows[0].DedupeKey)
	require.NotNil(t, rows[0].DeadAt)
	require.Equal(t, 10, rows[0].Attempts)

	out, err = o.run(t, "outbox", "replay", "--dead", "--limit", "1")
	require.NoError(t, err)
	require.Contains(t, out, "revived outbox row ")
	require.Contains(t, out, ": EmailSent order-confirmed:41 (event_id "+rows[0].EventID+")\n")
	require.Contains(t, out, "1 outbox rows revived; the relay leader publishes them within relay.poll_interval (1s)")
	out, err = o.run(t, "outbox", "replay", "--dead")
	require.NoError(t, err)
	require.Contains(t, out, "order-confirmed:42")
	require.EqualValues(t, 0, o.sc.QueryInt(t, `SELECT count(*) FROM outbox WHERE dead_at IS NOT NULL`))
	require.EqualValues(t, 2, o.sc.QueryInt(t, `SELECT count(*) FROM outbox WHERE published_at IS NULL AND attempts = 0 AND next_attempt_at <= now()`))

	out, err = o.run(t, "outbox", "replay", "--dead")
	require.NoError(t, err)
	require.Equal(t, "no dead outbox rows\n", out)
	out, err = o.run(t, "outbox", "replay")
	require.NoError(t, err)
	require.Equal(t, "no outbox row waits for a retry\n", out)
	out, err = o.run(t, "outbox", "list", "--dead")
	require.NoError(t, err)
	require.Equal(t, "no dead outbox rows\n", out)
	out, err = o.run(t, "outbox", "list")
	require.NoError(t, err)
	require.Contains(t, out, "waiting")
	require.Contains(t, out, "2 unpublished outbox rows\n")

	_, err = o.run(t, "outbox", "replay", "--limit", "-1")
	require.Error(t, err)
	_, err = o.run(t, "outbox")
	require.ErrorContains(t, err, "needs a subcommand")
}

func TestOutboxCommandsReportAnUnreachableDatabase(t *testing.T) {
	t.Parallel()
	cfg := writeOpsConfig(t, "postgres://postgres:pw-Secret-123@127.0.0.1:1/test?sslmode=disable", brokertest.URL(), brokertest.New(t), "")
	for _, args := range [][]string{{"outbox", "list"}, {"outbox", "replay", "--dead"}} {
		_, err := runCLI(t, cfg, args...)
		require.Equal(t, ExitUnavailable, ExitCode(err), args)
		require.NotContains(t, err.Error(), "pw-Secret-123")
	}
}
