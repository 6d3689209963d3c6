package feedback_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/api"
	"github.com/mailsvc/mailsvc/api/feedback"
	"github.com/mailsvc/mailsvc/internal/mailtype"
)

var (
	eventID = uuid.MustParse("0192f4c7-5e6f-7a8b-9c0d-1e2f3a4b5c6d")
	at      = time.Date(2026, 9, 18, 8, 0, 1, 123000000, time.UTC)
)

// base is an event of type typ with every required field and no optional
// one, in the status its schema asks for.
func base(typ mailtype.EventType) feedback.Event {
	e := feedback.Event{Type: typ, DedupeKey: "order-confirmed:42", OrderID: "42", Revision: 1, Template: "order_confirmed",
		Attempts: 1, Provider: "smtp", ProviderMessageID: "2.0.0 Ok: queued as 4F3A1"}
	switch typ {
	case mailtype.EmailSent, mailtype.EmailCancelTooLate:
		e.Status = mailtype.StatusSent
	case mailtype.EmailFailed:
		e.Status, e.ProviderMessageID = mailtype.StatusFailed, ""
		e.ErrorClass, e.ErrorReason = mailtype.Permanent, mailtype.ReasonRejected
	case mailtype.EmailCancelled:
		e.Status, e.Attempts, e.Provider, e.ProviderMessageID = mailtype.StatusCancelled, 0, "", ""
	case mailtype.EmailUnknown:
		e.Status, e.ProviderMessageID = mailtype.StatusUnknown, ""
		e.ErrorClass, e.ErrorReason = mailtype.Ambiguous, mailtype.ReasonTimeout
	case mailtype.EmailDelivered, mailtype.EmailComplained, mailtype.EmailBounced:
		e.Status, e.Provider, e.ProviderMessageID = mailtype.StatusSent, "resend", "56761188-7520-42d8-8898-ff6fc54ce618"
		e.ProviderEvent = &feedback.ProviderEvent{WebhookID: "msg_1", Type: "email." + strings.ToLower(strings.TrimPrefix(string(typ), "Email")),
			At: time.Date(2026, 9, 18, 8, 0, 4, 126000000, time.UTC)}
		if typ == mailtype.EmailBounced {
			e.Status, e.ProviderEvent.BounceType = mailtype.StatusFailed, "permanent"
		}
	}
	return e
}

// full is base with every optional field its event type's schema allows.
func full(typ mailtype.EventType) feedback.Event {
	e := base(typ)
	e.Revision, e.DedupeKey = 2, "order-confirmed:42:r2"
	e.SourceEventID = "0192f4c7-0000-7a8b-9c0d-1e2f3a4b5c6d"
	switch typ {
	case mailtype.EmailFailed, mailtype.EmailUnknown:
		e.Error = "550 5.1.1 <address> unknown"
		e.Detail = mailtype.ProviderDetail{SMTPCode: 550, SMTPEnhancedCode: "5.1.1", HTTPStatus: 422, ErrorName: "validation_error"}
		e.FailoverFrom = "resend"
	case mailtype.EmailSent:
		e.FailoverFrom = "resend"
		e.ProviderEvent = &feedback.ProviderEvent{WebhookID: "msg_1", Type: "email.delivered", At: at}
		e.ReconciledBy = "provider_evidence"
	case mailtype.EmailCancelTooLate, mailtype.EmailCancelled:
		e.FailoverFrom = "resend"
	case mailtype.EmailBounced:
		e.ProviderEvent.BounceSubtype, e.ProviderEvent.Reason = "Suppressed", "previous_bounce"
		e.ReconciledBy = "provider_evidence"
	case mailtype.EmailDelivered, mailtype.EmailComplained:
		e.ProviderEvent.Reason = "previous_bounce"
		e.ReconciledBy = "provider_evidence"
	}
	return e
}

// optionalKeys are the keys of data that Encode leaves out when unset.
var optionalKeys = []string{"source_event_id", "error_class", "error_reason", "error", "provider_detail", "provider_event",
	"failover_from", "reconciled_by"}

// Every event type, with its optional fields absent and present, encodes
// to a body its published schema accepts, with the message properties the
// document fixes.
func TestEveryEventTypeValidatesAgainstItsSchema(t *testing.T) {
	t.Parallel()
	require.NoError(t, api.Compile())
	require.Len(t, mailtype.OutputEventTypes, len(api.FeedbackSchemas))
	for _, typ := range mailtype.OutputEventTypes {
		for name, e := range map[string]feedback.Event{"bare": base(typ), "full": full(typ)} {
			t.Run(string(typ)+"/"+name, func(t *testing.T) {
				t.Parallel()
				m, err := feedback.New(e)
				require.NoError(t, err)
				require.Empty(t, api.ValidateFeedbackMessage(api.Message{RoutingKey: m.RoutingKey, MessageID: m.ID.String(),
					Type: string(m.Type), ContentType: "application/json", Persistent: true, Body: m.Body}))
				require.EqualValues(t, 7, m.ID.Version())
				require.Equal(t, time.UTC, m.At.Location())

				var body struct {
					EventID    string         `json:"event_id"`
					OccurredAt time.Time      `json:"occurred_at"`
					Data       map[string]any `json:"data"`
				}
				require.NoError(t, json.Unmarshal(m.Body, &body))
				require.Equal(t, m.ID.String(), body.EventID)
				require.True(t, m.At.Equal(body.OccurredAt))
				var present []string
				for _, k := range optionalKeys {
					if _, ok := body.Data[k]; ok {
						present = append(present, k)
					}
				}
				require.Equal(t, wantKeys(e), present)
			})
		}
	}
}

// wantKeys are the optional keys e sets, in optionalKeys' order.
func wantKeys(e feedback.Event) []string {
	set := map[string]bool{"source_event_id": e.SourceEventID != "", "error_class": e.ErrorClass != "",
		"error_reason": e.ErrorReason != "", "error": e.Error != "", "provider_detail": !e.Detail.IsZero(),
		"provider_event": e.ProviderEvent != nil, "failover_from": e.FailoverFrom != "", "reconciled_by": e.ReconciledBy != ""}
	var out []string
	for _, k := range optionalKeys {
		if set[k] {
			out = append(out, k)
		}
	}
	return out
}

// optionalKeys are every optional key of the published data but
// omitted_attachments (written by the store's statement), so the test
// above covers each one absent and present.
func TestOptionalKeysAreTheSchemasOptionalKeys(t *testing.T) {
	t.Parallel()
	b, err := api.Files.ReadFile("schemas/mail-event.json")
	require.NoError(t, err)
	var doc struct {
		Defs struct {
			Data struct {
				Required   []string                   `json:"required"`
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"data"`
		} `json:"$defs"`
	}
	require.NoError(t, json.Unmarshal(b, &doc))
	var optional []string
	for k := range doc.Defs.Data.Properties {
		if !slices.Contains(doc.Defs.Data.Required, k) && k != "omitted_attachments" {
			optional = append(optional, k)
		}
	}
	require.ElementsMatch(t, optionalKeys, optional)
}

// A body the schema refuses is caught by the validators: Encode writes
// what it is given, so the tests above are what keeps the events valid.
func TestEncodeWritesWhatItIsGiven(t *testing.T) {
	t.Parallel()
	e := base(mailtype.EmailSent)
	e.ErrorClass = mailtype.Permanent
	body, err := feedback.Encode(eventID, at, e)
	require.NoError(t, err)
	require.Equal(t, []string{"data.error_class: is not allowed"}, api.ValidateFeedback("EmailSent", body))
}

// The bytes are pinned: consumers and the stored outbox rows have them,
// and the encoding moved here from the store unchanged.
func TestEncodeIsPinned(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		e    feedback.Event
		want string
	}{
		{"sent, optional fields absent, revision 0 taken as 1",
			feedback.Event{Type: mailtype.EmailSent, DedupeKey: "order-confirmed:42", OrderID: "42", Template: "order_confirmed",
				Status: mailtype.StatusSent, Attempts: 1, Provider: "smtp", ProviderMessageID: "2.0.0 Ok: queued as 4F3A1", TraceContext: "tc"},
			`{"event_id":"0192f4c7-5e6f-7a8b-9c0d-1e2f3a4b5c6d","event_type":"EmailSent","version":1,"occurred_at":"2026-09-18T08:00:01.123Z",` +
				`"dedupe_key":"order-confirmed:42","data":{"order_id":"42","revision":1,"template":"order_confirmed","status":"sent",` +
				`"attempts":1,"provider":"smtp","provider_message_id":"2.0.0 Ok: queued as 4F3A1"}}`},
		{"failed with every failure field",
			full(mailtype.EmailFailed),
			`{"event_id":"0192f4c7-5e6f-7a8b-9c0d-1e2f3a4b5c6d","event_type":"EmailFailed","version":1,"occurred_at":"2026-09-18T08:00:01.123Z",` +
				`"dedupe_key":"order-confirmed:42:r2","data":{"order_id":"42","revision":2,"template":"order_confirmed","status":"failed",` +
				`"attempts":1,"provider":"smtp","provider_message_id":"","source_event_id":"0192f4c7-0000-7a8b-9c0d-1e2f3a4b5c6d",` +
				`"error_class":"permanent","error_reason":"rejected","error":"550 5.1.1 \u003caddress\u003e unknown",` +
				`"provider_detail":{"smtp_code":550,"smtp_enhanced_code":"5.1.1","http_status":422,"error_name":"validation_error"},` +
				`"failover_from":"resend"}}`},
		{"bounced with its provider event",
			full(mailtype.EmailBounced),
			`{"event_id":"0192f4c7-5e6f-7a8b-9c0d-1e2f3a4b5c6d","event_type":"EmailBounced","version":1,"occurred_at":"2026-09-18T08:00:01.123Z",` +
				`"dedupe_key":"order-confirmed:42:r2","data":{"order_id":"42","revision":2,"template":"order_confirmed","status":"failed",` +
				`"attempts":1,"provider":"resend","provider_message_id":"56761188-7520-42d8-8898-ff6fc54ce618",` +
				`"source_event_id":"0192f4c7-0000-7a8b-9c0d-1e2f3a4b5c6d","provider_event":{"webhook_id":"msg_1","type":"email.bounced",` +
				`"at":"2026-09-18T08:00:04.126Z","bounce_type":"permanent","bounce_subtype":"Suppressed","reason":"previous_bounce"},` +
				`"reconciled_by":"provider_evidence"}}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			body, err := feedback.Encode(eventID, at, c.e)
			require.NoError(t, err)
			require.Equal(t, c.want, string(body))
		})
	}
}

// A stored body decodes into Data, as the store's timeline reads it.
func TestDataDecodesAnEncodedBody(t *testing.T) {
	t.Parallel()
	e := full(mailtype.EmailFailed)
	body, err := feedback.Encode(eventID, at, e)
	require.NoError(t, err)
	var env struct {
		Data feedback.Data `json:"data"`
	}
	require.NoError(t, json.Unmarshal(body, &env))
	require.Equal(t, feedback.Data{OrderID: "42", Revision: 2, Template: "order_confirmed", Status: "failed", Attempts: 1, Provider: "smtp",
		SourceEventID: e.SourceEventID, ErrorClass: "permanent", ErrorReason: "rejected", Error: e.Error, ProviderDetail: &e.Detail,
		FailoverFrom: "resend"}, env.Data)
}
