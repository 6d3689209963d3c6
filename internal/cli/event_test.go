package cli

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const (
	validConfirmed = `{"event_id":"0192f4c4-8d3e-7b4a-9c1d-2e5f6a7b8c9d","event_type":"OrderConfirmed","version":1,
"occurred_at":"2026-09-18T08:00:00Z","dedupe_key":"order-confirmed:42","data":{"order_id":42,"email":"b@example.com",
"currency":"VND","items":[{"name":"Áo thun","quantity":2,"unit_price":"625000"}]}}`
	validCancelled = `{"event_id":"0192f4c6-3c4d-7e5f-9a6b-7c8d9e0f1a2b","event_type":"OrderCancelled","version":1,"occurred_at":"2026-09-18T08:05:00Z","data":{"order_id":42}}`
	// invalidConfirmed breaks several schema rules; the consumer stops at
	// the first it meets.
	invalidConfirmed = `{"event_id":"evt-42","event_type":"OrderConfirmed","version":1,"occurred_at":"2026-09-18T08:00:00Z",
"dedupe_key":"order-confirmed:42","data":{"order_id":42,"email":"B <b@example.com>","currency":"vnd",
"items":[{"name":"Áo thun","quantity":0,"unit_price":"625.000,00"}]}}`
)

// runValidate runs `event validate` with args, stdin as standard input.
func runValidate(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := newRoot(context.Background(), &out, &errOut)
	root.SetIn(strings.NewReader(stdin))
	root.SetArgs(append([]string{"event", "validate"}, args...))
	err := root.Execute()
	require.Empty(t, errOut.String())
	return out.String(), err
}

func TestEventValidateValidFile(t *testing.T) {
	t.Parallel()
	out, err := runValidate(t, "", writeData(t, validConfirmed))
	require.NoError(t, err)
	require.Regexp(t, `^\S+: event 1: valid\n\S+: 1 events valid\n$`, out)

	array := writeData(t, "[\n"+validConfirmed+",\n"+validCancelled+"\n]\n")
	out, err = runValidate(t, "", array)
	require.NoError(t, err)
	require.Equal(t, array+": event 1: valid\n"+array+": event 2: valid\n"+array+": 2 events valid\n", out)
}

func TestEventValidateInvalidFileGivesEveryReason(t *testing.T) {
	t.Parallel()
	file := writeData(t, validCancelled+"\n"+strings.ReplaceAll(invalidConfirmed, "\n", "")+"\n")
	out, err := runValidate(t, "", file)
	require.Error(t, err)
	require.Equal(t, 2, ExitCode(err))
	require.EqualError(t, err, file+": 1 of 2 events invalid")
	want := []string{
		"event 1: valid",
		`event 2: schema: data.currency: "vnd" is not an upper-case ISO 4217 code`,
		`event 2: schema: data.email: 'B <b@example.com>' is not valid email: invalid character ' '`,
		`event 2: schema: data.items[0].quantity: minimum: got 0, want 1`,
		`event 2: schema: data.items[0].unit_price: "625.000,00" is not a decimal amount (digits with an optional '.' fraction)`,
		`event 2: schema: event_id: 'evt-42' is not valid uuid: must have 5 elements`,
		`event 2: consumer: invalid_field: event_id "evt-42" is not a UUID`,
	}
	for i := range want {
		want[i] = file + ": " + want[i] + "\n"
	}
	require.Equal(t, strings.Join(want, ""), out)
}

func TestEventValidateStdin(t *testing.T) {
	t.Parallel()
	out, err := runValidate(t, validConfirmed+"\n"+validCancelled+"\n", "-")
	require.NoError(t, err)
	require.Equal(t, "-: event 1: valid\n-: event 2: valid\n-: 2 events valid\n", out)

	// A cross-field rule only the consumer knows: the dedupe key of
	// another order.
	other := strings.Replace(validConfirmed, "order-confirmed:42", "order-confirmed:43", 1)
	out, err = runValidate(t, other, "-")
	require.Equal(t, 2, ExitCode(err))
	require.Equal(t, "-: event 1: consumer: invalid_field: dedupe_key \"order-confirmed:43\" must be \"order-confirmed:42\" for an OrderConfirmed of revision 1\n", out)

	out, err = runValidate(t, `{"event_type":"OrderShipped","event_id":"x"}`, "-")
	require.Equal(t, 2, ExitCode(err))
	require.Equal(t, "-: event 1: schema: event_type: value must be one of 'OrderConfirmed', 'OrderCancelled'\n"+
		"-: event 1: consumer: ignored: mailsvc does not handle this event_type (the consumer acknowledges and drops it)\n", out)
}

// A broken line of NDJSON does not hide the lines after it: each line is
// judged on its own, as the consumer judges each message.
func TestEventValidateNDJSONWithABrokenLine(t *testing.T) {
	t.Parallel()
	out, err := runValidate(t, validConfirmed+"\n{bad\n"+validCancelled+"\n", "-")
	require.Equal(t, 2, ExitCode(err))
	require.Contains(t, out, "-: event 1: valid\n")
	require.Contains(t, out, "-: event 2: consumer: malformed_json: ")
	require.Contains(t, out, "-: event 3: valid\n")
	require.Equal(t, 3, strings.Count(out, "-: event 2: ")+strings.Count(out, "-: event 1: ")+strings.Count(out, "-: event 3: ")-1,
		"event 2 gets a schema and a consumer reason, the others one line each")
}

func TestEventValidateRefusesUnreadableInput(t *testing.T) {
	t.Parallel()
	for name, in := range map[string]string{"empty": " \n", "empty array": "[]", "not JSON": `{"event_id": `, "broken array": `[{}`} {
		out, err := runValidate(t, in, "-")
		require.Error(t, err, name)
		require.Equal(t, 2, ExitCode(err), name)
		require.Empty(t, out, name)
	}
	_, err := runValidate(t, "", "/nonexistent/events.json")
	require.Equal(t, 2, ExitCode(err))
	_, err = runValidate(t, "")
	require.Equal(t, 1, ExitCode(err), "FILE is required")
}

func TestEventValidateReadsTheConfig(t *testing.T) {
	t.Parallel()
	// amqp.max_message_bytes comes from the config, as serve reads it.
	cfg := writeData(t, "mail:\n  from: Shop <orders@example.com>\namqp:\n  max_message_bytes: 100\n")
	out, err := runValidate(t, validCancelled, "--config", cfg, "-")
	require.Equal(t, 2, ExitCode(err))
	require.Equal(t, "-: event 1: consumer: too_large: body is 153 bytes, more than 100\n", out)

	_, err = runValidate(t, validCancelled, "--config", writeData(t, "amqp:\n  nope: 1\n"), "-")
	require.Equal(t, 2, ExitCode(err))
	require.ErrorContains(t, err, "invalid config")
}

// An event with two keys that encoding/json takes for one field (equal, or
// equal but for letter case), in any object at any depth, is invalid: the
// consumer's reason names the object's path and both keys, and the exit
// code is 2, whatever the schema, which reads such keys otherwise, says.
func TestEventValidateRefusesDuplicateKeys(t *testing.T) {
	t.Parallel()
	flat := strings.ReplaceAll(validConfirmed, "\n", "")
	cases := []struct {
		name, old, new, want string
	}{
		{"exact duplicate email", `"email":"b@example.com"`, `"email":"b@example.com","email":"victim@example.com"`,
			`data: key "email" duplicates "email"`},
		{"case variant email", `"email":"b@example.com"`, `"email":"b@example.com","EMAIL":"victim@example.com"`,
			`data: key "EMAIL" duplicates "email"`},
		{"Kelvin sign", `"email":"b@example.com"`, `"email":"b@example.com","\u212aey":1,"key":2`,
			`data: key "key" duplicates "` + "\u212a" + `ey"`},
		{"two event_ids", `"event_id":"0192f4c4-8d3e-7b4a-9c1d-2e5f6a7b8c9d"`,
			`"event_id":"0192f4c4-8d3e-7b4a-9c1d-2e5f6a7b8c9d","event_id":"0192f4c4-0000-7b4a-9c1d-2e5f6a7b8c9d"`,
			`body: key "event_id" duplicates "event_id"`},
		{"event_type in another case", `"event_type":"OrderConfirmed"`, `"event_type":"OrderShipped","Event_Type":"OrderConfirmed"`,
			`body: key "Event_Type" duplicates "event_type"`},
		{"an item's quantity", `"quantity":2`, `"quantity":2,"QUANTITY":200`,
			`data.items[0]: key "QUANTITY" duplicates "quantity"`},
		{"deep in an item", `"quantity":2`, `"quantity":2,"options":{"gift":[{"to":"B"},{"to":"B","tO":"C"}]}`,
			`data.items[0].options.gift[1]: key "tO" duplicates "to"`},
	}
	var ndjson []string
	for _, c := range cases {
		require.Equal(t, 1, strings.Count(flat, c.old), c.name)
		ev := strings.Replace(flat, c.old, c.new, 1)
		ndjson = append(ndjson, ev)

		out, err := runValidate(t, ev, "-")
		require.Error(t, err, c.name)
		require.Equal(t, ExitInvalid, ExitCode(err), c.name)
		require.Contains(t, out, "-: event 1: consumer: malformed_json: "+c.want+" (", c.name)
		require.NotContains(t, out, "valid\n", c.name)
	}

	// Every line of a file is judged, each naming its own path.
	file := writeData(t, strings.Join(append(ndjson, flat), "\n")+"\n")
	out, err := runValidate(t, "", file)
	require.Equal(t, ExitInvalid, ExitCode(err))
	require.EqualError(t, err, file+": 7 of 8 events invalid")
	for i, c := range cases {
		require.Contains(t, out, fmt.Sprintf("%s: event %d: consumer: malformed_json: %s", file, i+1, c.want), c.name)
	}
	require.Contains(t, out, file+": event 8: valid\n")

	// The same key in sibling objects is no duplicate.
	two := strings.Replace(flat, `"items":[{"name":"Áo thun","quantity":2,"unit_price":"625000"}]`,
		`"items":[{"name":"Áo thun","quantity":2,"unit_price":"625000"},{"name":"Nón lá","quantity":1,"unit_price":"150000"}]`, 1)
	require.NotEqual(t, flat, two)
	out, err = runValidate(t, two, "-")
	require.NoError(t, err, out)
}
