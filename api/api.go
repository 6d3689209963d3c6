// Package api is mailsvc's published event contract: the AsyncAPI 3.0
// document asyncapi.yaml and the JSON Schemas (draft 2020-12) under
// schemas/, embedded, with validators built on them. ValidateInput checks an
// input event (order.events) against schemas/order-event.json;
// ValidateFeedback and ValidateFeedbackMessage check a feedback event
// (mail.events) against its event type's schema and the AMQP properties the
// document fixes. The consumer's own rules that no schema can state (see
// asyncapi.yaml) are not checked here: `mailsvc event validate` runs the
// consumer for those.
package api

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Files holds asyncapi.yaml and schemas/*.json, as in the repository.
//
//go:embed asyncapi.yaml schemas/*.json
var Files embed.FS

// SchemaBase is the URI every schema's $id starts with, followed by its
// file name (https://mailsvc.example/schemas/v1/order-event.json). The
// names are identifiers only: nothing is served there (RFC 2606 reserves
// .example).
const SchemaBase = "https://mailsvc.example/schemas/v1/"

// InputSchema is the file of the schema of every input event mailsvc
// handles (OrderConfirmed or OrderCancelled, chosen by event_type).
const InputSchema = "order-event.json"

// FeedbackSchemas maps each feedback event type to its schema file.
var FeedbackSchemas = map[string]string{
	"EmailSent":          "email-sent.json",
	"EmailFailed":        "email-failed.json",
	"EmailCancelled":     "email-cancelled.json",
	"EmailCancelTooLate": "email-cancel-too-late.json",
	"EmailUnknown":       "email-unknown.json",
	"EmailDelivered":     "email-delivered.json",
	"EmailBounced":       "email-bounced.json",
	"EmailComplained":    "email-complained.json",
}

// compiled is the schema set, compiled once from Files.
type compiled struct {
	input    *jsonschema.Schema
	feedback map[string]*jsonschema.Schema
}

var schemas = sync.OnceValues(compile)

// Compile compiles every embedded schema, asserting formats, and returns
// the first error. The validators panic on such an error (the embedded
// files are fixed at build time and tested), so tests call Compile first.
func Compile() error {
	_, err := schemas()
	return err
}

func compile() (*compiled, error) {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(jsonschema.SchemeURLLoader{}) // every schema is embedded: load nothing else
	names, err := fs.Glob(Files, "schemas/*.json")
	if err != nil {
		return nil, err
	}
	for _, name := range names {
		b, err := Files.ReadFile(name)
		if err != nil {
			return nil, err
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if err := c.AddResource(SchemaBase+path.Base(name), doc); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	out := &compiled{feedback: map[string]*jsonschema.Schema{}}
	if out.input, err = c.Compile(SchemaBase + InputSchema); err != nil {
		return nil, err
	}
	for typ, file := range FeedbackSchemas {
		if out.feedback[typ], err = c.Compile(SchemaBase + file); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func mustSchemas() *compiled {
	s, err := schemas()
	if err != nil {
		panic(fmt.Sprintf("api: embedded schemas do not compile: %v", err))
	}
	return s
}

// ValidateInput validates the body of an input event against
// schemas/order-event.json and returns every reason it is invalid, each
// naming the field ("data.items[0].quantity: ..."), sorted; nil when it is
// valid. An event type other than OrderConfirmed and OrderCancelled is
// invalid here (the consumer ignores it).
func ValidateInput(body []byte) []string {
	return validate(mustSchemas().input, body)
}

// ValidateFeedback validates the body of a feedback event of eventType
// (the AMQP type property) against that type's schema and returns every
// reason it is invalid, sorted; nil when it is valid.
func ValidateFeedback(eventType string, body []byte) []string {
	sch, ok := mustSchemas().feedback[eventType]
	if !ok {
		return []string{fmt.Sprintf("type: %q is not a feedback event type of this contract", eventType)}
	}
	return validate(sch, body)
}

func validate(sch *jsonschema.Schema, body []byte) []string {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return []string{"body: not one JSON value: " + err.Error()}
	}
	err = sch.Validate(v)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return []string{"body: " + err.Error()}
	}
	return reasons(ve, v)
}
