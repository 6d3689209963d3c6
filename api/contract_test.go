package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/mailsvc/mailsvc/api"
	"github.com/mailsvc/mailsvc/internal/consumer"
	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/templates"
)

func TestSchemasCompileWithStableIDs(t *testing.T) {
	t.Parallel()
	require.NoError(t, api.Compile())
	names, err := fs.Glob(api.Files, "schemas/*.json")
	require.NoError(t, err)
	require.Len(t, names, 13)
	for _, name := range names {
		var head struct {
			Schema string `json:"$schema"`
			ID     string `json:"$id"`
		}
		b, err := api.Files.ReadFile(name)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(b, &head))
		require.Equal(t, "https://json-schema.org/draft/2020-12/schema", head.Schema, name)
		require.Equal(t, api.SchemaBase+path.Base(name), head.ID, name)
	}
}

// schemaFile reads one embedded schema as generic JSON.
func schemaFile(t *testing.T, name string) map[string]any {
	t.Helper()
	b, err := api.Files.ReadFile("schemas/" + name)
	require.NoError(t, err)
	var v map[string]any
	require.NoError(t, json.Unmarshal(b, &v))
	return v
}

// at follows a path of object keys.
func at(t *testing.T, v any, keys ...string) any {
	t.Helper()
	for _, k := range keys {
		m, ok := v.(map[string]any)
		require.True(t, ok, "no object at %q", k)
		v = m[k]
	}
	return v
}

func strs(t *testing.T, v any) []string {
	t.Helper()
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

// reasonConstants parses internal/mailtype/errors.go for every constant of
// type Reason, so that a reason added there and not to the schema fails.
func reasonConstants(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "../internal/mailtype/errors.go", nil, 0)
	require.NoError(t, err)
	var out []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Reason" {
				continue
			}
			for _, v := range vs.Values {
				lit := v.(*ast.BasicLit)
				s, err := strconv.Unquote(lit.Value)
				require.NoError(t, err)
				out = append(out, s)
			}
		}
	}
	require.NotEmpty(t, out)
	return out
}

func TestFeedbackSchemaListsWhatTheCodeHas(t *testing.T) {
	t.Parallel()
	mail := schemaFile(t, "mail-event.json")
	data := at(t, mail, "$defs", "data", "properties")
	var statuses []string
	for _, s := range mailtype.Statuses {
		if s == mailtype.StatusHeld {
			continue // no event is written while a mail is held: release and cancel-held report pending or cancelled
		}
		statuses = append(statuses, string(s))
	}
	require.Equal(t, statuses, strs(t, at(t, data, "status", "enum")))
	require.Equal(t, []string{string(mailtype.Transient), string(mailtype.Permanent), string(mailtype.Ambiguous)},
		strs(t, at(t, data, "error_class", "enum")))
	require.ElementsMatch(t, reasonConstants(t), strs(t, at(t, mail, "$defs", "errorReason", "enum")))
	require.Contains(t, strs(t, at(t, data, "template", "enum")), templates.OrderConfirmed)

	var types []string
	for _, et := range mailtype.OutputEventTypes {
		types = append(types, string(et))
		require.Contains(t, api.FeedbackSchemas, string(et))
	}
	require.Len(t, api.FeedbackSchemas, len(types))
	require.Equal(t, types, strs(t, at(t, mail, "properties", "event_type", "enum")))
	input := schemaFile(t, "order-event.json")
	require.Equal(t, []string{string(mailtype.OrderConfirmed), string(mailtype.OrderCancelled)},
		strs(t, at(t, input, "properties", "event_type", "enum")))
}

func TestDocumentMatchesTheCode(t *testing.T) {
	t.Parallel()
	doc, err := api.ReadDocument()
	require.NoError(t, err)
	require.Len(t, doc.Messages, len(mailtype.OutputEventTypes)+2)
	for _, et := range mailtype.OutputEventTypes {
		r := doc.Messages[string(et)]
		require.Equal(t, api.Route{
			Action: "send", Exchange: "mail.events", RoutingKey: et.RoutingKey(), Persistent: true,
			MessageType: string(et), ContentType: "application/json", Schema: api.FeedbackSchemas[string(et)],
		}, r, et)
	}
	for et, file := range map[mailtype.EventType]string{
		mailtype.OrderConfirmed: "order-confirmed.json", mailtype.OrderCancelled: "order-cancelled.json",
	} {
		r := doc.Messages[string(et)]
		require.Equal(t, "receive", r.Action, et)
		require.Equal(t, "order.events", r.Exchange, et)
		require.Equal(t, file, r.Schema, et)
		require.Equal(t, string(et), r.MessageType, et)
	}
}

// documentJSON is asyncapi.yaml as JSON values (YAML integers become
// numbers).
func documentJSON(t *testing.T) map[string]any {
	t.Helper()
	b, err := api.Files.ReadFile("asyncapi.yaml")
	require.NoError(t, err)
	var y any
	require.NoError(t, yaml.Unmarshal(b, &y))
	j, err := json.Marshal(y)
	require.NoError(t, err)
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
	require.NoError(t, err)
	return v.(map[string]any)
}

func TestDocumentIsValidAsyncAPI(t *testing.T) {
	t.Parallel()
	c := jsonschema.NewCompiler()
	sch, err := c.Compile("testdata/asyncapi-3.0.0.schema.json")
	require.NoError(t, err)
	require.NoError(t, sch.Validate(documentJSON(t)))
}

// TestDocumentExamplesValidate: every example payload of asyncapi.yaml is
// valid by its message's schema, and every input example is one the
// consumer records.
func TestDocumentExamplesValidate(t *testing.T) {
	t.Parallel()
	doc, err := api.ReadDocument()
	require.NoError(t, err)
	d := newDecider(t)
	msgs := at(t, documentJSON(t), "components", "messages").(map[string]any)
	n := 0
	for name, m := range msgs {
		examples, _ := at(t, m, "examples").([]any)
		require.NotEmpty(t, examples, "message %s has no example", name)
		for _, ex := range examples {
			body, err := json.Marshal(at(t, ex, "payload"))
			require.NoError(t, err)
			n++
			label := fmt.Sprintf("%s example %v", name, at(t, ex, "name"))
			if doc.Messages[name].Action == "receive" {
				assert.Empty(t, api.ValidateInput(body), label)
				dec := d.Decide(consumerMessage(body, ""))
				assert.Equal(t, consumer.ActionRecord, dec.Action, "%s: %v", label, dec.Err)
				continue
			}
			assert.Empty(t, api.ValidateFeedback(name, body), label)
		}
	}
	require.Equal(t, 12, n)
}

// feedbackBody is a valid EmailFailed body; change edits its data.
func feedbackBody(t *testing.T, eventType string, change func(data map[string]any)) []byte {
	t.Helper()
	data := map[string]any{
		"order_id": "42", "template": "order_confirmed", "status": "failed", "attempts": 1,
		"provider": "smtp", "provider_message_id": "", "revision": 1,
		"source_event_id": "0192f4c4-8d3e-7b4a-9c1d-2e5f6a7b8c9d",
		"error_class":     "permanent", "error_reason": "rejected", "error": "550 5.1.1 <address>",
		"provider_detail": map[string]any{"smtp_code": 550, "smtp_enhanced_code": "5.1.1"},
	}
	if change != nil {
		change(data)
	}
	b, err := json.Marshal(map[string]any{
		"event_id": "0192f4c7-5e6f-7a8b-9c0d-1e2f3a4b5c6d", "event_type": eventType, "version": 1,
		"occurred_at": "2026-09-18T08:00:01.25Z", "dedupe_key": "order-confirmed:42", "data": data,
	})
	require.NoError(t, err)
	return b
}

func TestValidateFeedback(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, eventType string
		change          func(map[string]any)
		want            []string
	}{
		{"valid failure", "EmailFailed", nil, nil},
		{"a sent mail carries no error", "EmailSent", func(d map[string]any) {
			d["status"] = "sent"
			d["provider_message_id"] = "2.0.0 Ok: queued as 4F3A1"
		}, []string{"data.error: is not allowed", "data.error_class: is not allowed", "data.error_reason: is not allowed"}},
		{"a failure names its reason", "EmailFailed", func(d map[string]any) {
			delete(d, "error_class")
			delete(d, "error_reason")
		}, []string{"data.error_class: is required", "data.error_reason: is required"}},
		{"revision is required", "EmailFailed", func(d map[string]any) { delete(d, "revision") },
			[]string{"data.revision: is required"}},
		{"status of the event type", "EmailCancelTooLate", func(d map[string]any) { d["status"] = "failed" },
			[]string{"data.status: value must be one of 'sent', 'unknown'"}},
		{"closed lists", "EmailUnknown", func(d map[string]any) {
			d["status"], d["error_reason"], d["provider"], d["template"] = "unknown", "because", "mailgun", "welcome"
		}, []string{
			"data.error_reason: value must be one of " + quotedList(reasonConstants(t)),
			"data.provider: value must be one of '', 'smtp', 'resend'",
			"data.template: value must be one of 'order_confirmed', 'order_cancelled'",
		}},
		{"no address, no control character, no undocumented field", "EmailFailed", func(d map[string]any) {
			d["error"] = "550 b@example.com unknown\r\n"
			d["to_email"] = "b@example.com"
			d["provider_detail"] = map[string]any{"smtp_code": 250.5, "smtp_enhanced_code": "5.1", "http_status": 42, "retry": true}
		}, []string{
			"data.error: \"550 b@example.com unknown\\r\\n\" contains a control character",
			"data.error: contains an e-mail address",
			"data.provider_detail.http_status: minimum: got 42, want 100",
			"data.provider_detail.retry: is not allowed",
			"data.provider_detail.smtp_code: got number, want integer",
			"data.provider_detail.smtp_enhanced_code: \"5.1\" is not an RFC 3463 status code class.subject.detail",
			"data.to_email: is not allowed",
		}},
		{"a suppressed mail fails unsent", "EmailFailed", func(d map[string]any) {
			d["error_reason"], d["attempts"], d["provider"] = "suppressed", 0, ""
			delete(d, "provider_detail")
		}, nil},
		{"delivered", "EmailDelivered", providerEvent("email.delivered", nil), nil},
		{"bounced", "EmailBounced", failedBy(providerEvent("email.bounced", map[string]any{"bounce_type": "permanent", "bounce_subtype": "Suppressed"})), nil},
		{"bounced for now", "EmailBounced", failedBy(providerEvent("email.bounced", map[string]any{"bounce_type": "transient", "bounce_subtype": "MailboxFull"})), nil},
		{"failed after it was sent", "EmailFailed", func(d map[string]any) {
			providerEvent("email.failed", map[string]any{"reason": "reached_daily_quota"})(d)
			d["status"], d["error_class"], d["error_reason"] = "failed", "permanent", "provider_failed"
		}, nil},
		{"an EmailFailed reports a failure or a suppression only", "EmailFailed", func(d map[string]any) {
			providerEvent("email.delivered", map[string]any{"reason": "no spaces allowed"})(d)
			d["status"], d["error_class"], d["error_reason"] = "failed", "permanent", "suppressed"
		}, []string{
			"data.provider_event.reason: \"no spaces allowed\" is not 1 to 64 letters, digits, '_', '.' or '-'",
			"data.provider_event.type: value must be one of 'email.failed', 'email.suppressed'",
		}},
		{"complained", "EmailComplained", providerEvent("email.complained", nil), nil},
		{"provider feedback names its webhook and carries no error", "EmailDelivered", func(d map[string]any) {
			providerEvent("email.delivered", nil)(d)
			d["error_class"], d["provider_detail"] = "permanent", map[string]any{"http_status": 200}
			delete(d["provider_event"].(map[string]any), "webhook_id")
		}, []string{
			"data.error_class: is not allowed",
			"data.provider_detail: is not allowed",
			"data.provider_event.webhook_id: is required",
		}},
		{"a bounce has a known type and is of its own event type", "EmailBounced", failedBy(providerEvent("email.delivered", map[string]any{"bounce_type": "soft"})), []string{
			"data.provider_event.bounce_type: value must be one of 'permanent', 'transient', 'undetermined'",
			"data.provider_event.type: value must be 'email.bounced'",
		}},
		{"only a bounce has a bounce type", "EmailComplained", providerEvent("email.complained", map[string]any{"bounce_type": "permanent"}), []string{
			"data.provider_event.bounce_type: is not allowed",
		}},
		{"an EmailSent carries a provider event only when reconciled by it", "EmailSent", func(d map[string]any) {
			providerEvent("email.delivered", nil)(d)
		}, []string{"data: properties 'reconciled_by' required, if 'provider_event' exists"}},
		{"an EmailSent reconciled by provider evidence carries the report", "EmailSent", func(d map[string]any) {
			providerEvent("email.delivered", nil)(d)
			d["reconciled_by"] = "provider_evidence"
		}, nil},
		{"an EmailCancelTooLate is never reconciled", "EmailCancelTooLate", func(d map[string]any) {
			d["status"] = "sent"
			d["reconciled_by"] = "provider_evidence"
		}, []string{"data.reconciled_by: is not allowed"}},
		{"reconciled_by names provider evidence", "EmailDelivered", func(d map[string]any) {
			providerEvent("email.delivered", nil)(d)
			d["reconciled_by"] = "operator"
		}, []string{"data.reconciled_by: value must be 'provider_evidence'"}},
		{"a bounced mail is failed", "EmailBounced", providerEvent("email.bounced", map[string]any{"bounce_type": "permanent"}),
			[]string{"data.status: value must be 'failed'"}},
		{"a complaint is of a sent mail", "EmailComplained", failedBy(providerEvent("email.complained", nil)),
			[]string{"data.status: value must be 'sent'"}},
		{"unknown event type", "EmailOpened", nil, []string{`type: "EmailOpened" is not a feedback event type of this contract`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, c.want, api.ValidateFeedback(c.eventType, feedbackBody(t, c.eventType, c.change)))
		})
	}
	require.Equal(t, []string{"body: not one JSON value: unexpected EOF"}, api.ValidateFeedback("EmailSent", []byte(`{"event_id":`)))
}

// providerEvent turns feedbackBody's data into a sent mail's provider
// feedback: no error fields, a Resend email id, and a provider_event of
// type typ with extra fields.
func providerEvent(typ string, extra map[string]any) func(map[string]any) {
	return func(d map[string]any) {
		for _, k := range []string{"error_class", "error_reason", "error", "provider_detail"} {
			delete(d, k)
		}
		d["status"], d["provider"], d["provider_message_id"] = "sent", "resend", "56761188-7520-42d8-8898-ff6fc54ce618"
		pe := map[string]any{"webhook_id": "msg_2qEJtLw3rUgYkU7pZ3xKb9aD1", "type": typ, "at": "2026-09-18T08:00:04.126Z"}
		for k, v := range extra {
			pe[k] = v
		}
		d["provider_event"] = pe
	}
}

// failedBy makes change's mail failed, as a bounce leaves it.
func failedBy(change func(map[string]any)) func(map[string]any) {
	return func(d map[string]any) {
		change(d)
		d["status"] = "failed"
	}
}

func quotedList(items []string) string {
	s := ""
	for i, it := range items {
		if i > 0 {
			s += ", "
		}
		s += "'" + it + "'"
	}
	return s
}

func TestValidateFeedbackMessage(t *testing.T) {
	t.Parallel()
	body := feedbackBody(t, "EmailFailed", nil)
	ok := api.Message{RoutingKey: "email.failed", MessageID: "0192f4c7-5e6f-7a8b-9c0d-1e2f3a4b5c6d", Type: "EmailFailed",
		ContentType: "application/json", Persistent: true, Body: body}
	require.Empty(t, api.ValidateFeedbackMessage(ok))
	bad := ok
	bad.RoutingKey, bad.MessageID, bad.ContentType, bad.Persistent = "email.sent", "0192f4c7-0000-7a8b-9c0d-1e2f3a4b5c6d", "text/plain", false
	require.Equal(t, []string{
		`routing key: "email.sent", want "email.failed" for EmailFailed`,
		`content_type: "text/plain", want "application/json"`,
		"delivery_mode: persistent false, want true",
		`message_id: "0192f4c7-0000-7a8b-9c0d-1e2f3a4b5c6d" differs from event_id "0192f4c7-5e6f-7a8b-9c0d-1e2f3a4b5c6d"`,
	}, api.ValidateFeedbackMessage(bad))
	require.True(t, slices.Contains(api.ValidateFeedbackMessage(api.Message{Type: "EmailSent", Body: body}),
		"data.status: value must be 'sent'"))
}
