package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/mailsvc/mailsvc/api"
	"github.com/mailsvc/mailsvc/internal/app"
	"github.com/mailsvc/mailsvc/internal/consumer"
	"github.com/mailsvc/mailsvc/internal/templates"
)

// ExitInvalid is the exit code of `event validate` when an event is
// invalid (the code of an invalid config, too: both are input to fix).
const ExitInvalid = 2

func newEventCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{Use: "event", Short: "Work with the event contract (api/asyncapi.yaml)"}
	cmd.AddCommand(newEventValidateCmd(e))
	return cmd
}

func newEventValidateCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "validate FILE|-",
		Short: "Check input events (OrderConfirmed, OrderCancelled) against the contract, for an order service's CI",
		Long: `Validate reads events from FILE ("-" = stdin): one JSON event, a JSON array of events, or
NDJSON (one event per line). Each event is checked twice: against the JSON Schema
api/schemas/order-event.json (draft 2020-12, formats asserted), and by mailsvc's own consumer,
exactly as it decides a delivery (the rules no schema can state: no object with two keys equal
ignoring letter case, such as "email" twice or "email" and "EMAIL", at any depth; dedupe_key
derived from order_id and revision, known ISO 4217 currency, decimals of the currency, byte
limits, rendering), without a broker or a database. It prints every reason of both, one per
line, naming the field, and exits 0 when every event is valid, 2 when one is not. The AMQP
message_id (which must equal event_id) is a message property, not in a file: it is not checked.

Limits and templates come from --config (amqp.max_message_bytes, templates.*) when given, else
from the defaults.`,
		Example: "  mailsvc event validate testdata/events.json\n  produce-events | mailsvc event validate -",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := e.decider()
			if err != nil {
				return err
			}
			return validateEvents(cmd.InOrStdin(), e.stdout, args[0], d)
		},
	}
}

// decider builds the consumer's Decider as serve does: from the config when
// one is given (--config or MAILSVC_CONFIG), else from the defaults.
func (e *env) decider() (*consumer.Decider, error) {
	// Without a config, attachments are checked as the contract says, as
	// on a deployment that fetches them.
	c := consumer.Config{Attachments: consumer.AttachmentRules{Enabled: true}}
	opts := templates.Options{}
	if e.configPath != "" {
		cfg, err := e.load()
		if err != nil {
			return nil, err
		}
		c = app.ConsumerConfig(cfg)
		opts = app.TemplatesOptions(cfg)
	}
	c = c.WithDefaults()
	reg, err := templates.New(opts)
	if err != nil {
		return nil, &ExitError{Code: ExitInvalid, Err: err}
	}
	return &consumer.Decider{MaxBytes: c.MaxMessageBytes, MaxEventAge: c.MaxEventAge, Templates: reg, Attachments: c.Attachments}, nil
}

// validateEvents checks every event of the file at path and prints one line
// per reason, then a summary.
func validateEvents(stdin io.Reader, out io.Writer, path string, d *consumer.Decider) error {
	b, err := readInput(stdin, path)
	if err != nil {
		return err
	}
	events, err := splitEvents(b)
	if err != nil {
		return &ExitError{Code: ExitInvalid, Err: fmt.Errorf("%s: %w", path, err)}
	}
	w := bufio.NewWriter(out)
	invalid := 0
	for i, ev := range events {
		reasons := eventReasons(d, ev)
		if len(reasons) > 0 {
			invalid++
		}
		label := fmt.Sprintf("%s: event %d", path, i+1)
		for _, r := range reasons {
			fmt.Fprintf(w, "%s: %s\n", label, r)
		}
		if len(reasons) == 0 {
			fmt.Fprintf(w, "%s: valid\n", label)
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if invalid > 0 {
		return &ExitError{Code: ExitInvalid, Err: fmt.Errorf("%s: %d of %d events invalid", path, invalid, len(events))}
	}
	_, err = fmt.Fprintf(out, "%s: %d events valid\n", path, len(events))
	return err
}

// eventReasons returns every reason body is not an input event mailsvc
// accepts: the schema's ("schema: FIELD: ..."), then the consumer's verdict
// ("consumer: REASON: ..."). Empty means the consumer would record it.
func eventReasons(d *consumer.Decider, body []byte) []string {
	var out []string
	for _, r := range api.ValidateInput(body) {
		out = append(out, "schema: "+r)
	}
	dec := d.Decide(consumer.Message{Body: body})
	switch dec.Action {
	case consumer.ActionIgnore:
		out = append(out, "consumer: ignored: mailsvc does not handle this event_type (the consumer acknowledges and drops it)")
	case consumer.ActionDeadLetter:
		out = append(out, fmt.Sprintf("consumer: %s: %v", dec.Err.Reason, dec.Err.Err))
	}
	return out
}

func readInput(stdin io.Reader, path string) ([]byte, error) {
	var b []byte
	var err error
	if path == "-" {
		b, err = io.ReadAll(stdin)
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, &ExitError{Code: ExitInvalid, Err: fmt.Errorf("read events: %w", err)}
	}
	return b, nil
}

// splitEvents splits a JSON array into its elements, and one JSON value or
// NDJSON (values one after another) into its values, each as sent.
func splitEvents(b []byte) ([]json.RawMessage, error) {
	trimmed := bytes.TrimSpace(b)
	if len(trimmed) == 0 {
		return nil, errors.New("no event: the input is empty")
	}
	if trimmed[0] == '[' {
		var events []json.RawMessage
		if err := json.Unmarshal(trimmed, &events); err != nil {
			return nil, fmt.Errorf("not a JSON array of events: %w", err)
		}
		if len(events) == 0 {
			return nil, errors.New("no event: the array is empty")
		}
		return events, nil
	}
	var events []json.RawMessage
	for rest := trimmed; len(bytes.TrimSpace(rest)) > 0; {
		dec := json.NewDecoder(bytes.NewReader(rest))
		var ev json.RawMessage
		if err := dec.Decode(&ev); err == nil {
			events = append(events, ev)
			rest = rest[dec.InputOffset():]
			continue
		} else if bytes.IndexByte(trimmed, '\n') < 0 {
			return nil, fmt.Errorf("event %d is not JSON: %w", len(events)+1, err)
		}
		// NDJSON with a broken line: that line is one (invalid) event, and
		// reading goes on after it, as the consumer judges every message
		// on its own.
		rest = bytes.TrimLeft(rest, " \t\r\n")
		line, after, _ := bytes.Cut(rest, []byte("\n"))
		events = append(events, json.RawMessage(bytes.TrimSpace(line)))
		rest = after
	}
	return events, nil
}
