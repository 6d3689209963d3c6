package store

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// The bytes of a feedback event's body are pinned: the encoding moved
// once and must not drift. event_id and occurred_at are made at encoding
// time, so the golden bodies hold them as %[1]s and %[2]s.
func TestFeedbackBodyIsPinned(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		f    Feedback
		want string
	}{
		{"sent, optional fields absent, revision 0 taken as 1",
			Feedback{Type: mailtype.EmailSent, DedupeKey: "order-confirmed:42", OrderID: "42", Template: "order_confirmed",
				Status: mailtype.StatusSent, Attempts: 1, Provider: "smtp", ProviderMessageID: "2.0.0 Ok: queued as 4F3A1", TraceContext: "tc"},
			`{"event_id":"%[1]s","event_type":"EmailSent","version":1,"occurred_at":"%[2]s","dedupe_key":"order-confirmed:42",` +
				`"data":{"order_id":"42","revision":1,"template":"order_confirmed","status":"sent","attempts":1,"provider":"smtp",` +
				`"provider_message_id":"2.0.0 Ok: queued as 4F3A1"}}`},
		{"failed with every failure field",
			Feedback{Type: mailtype.EmailFailed, DedupeKey: "order-confirmed:7:r2", OrderID: "7", Revision: 2, Template: "order_confirmed",
				Status: mailtype.StatusFailed, Attempts: 3, Provider: "resend", SourceEventID: "0190a0a0-0000-7000-8000-000000000001",
				ErrorClass: mailtype.Permanent, ErrorReason: mailtype.ReasonRejected, Error: "550 <address> unknown",
				Detail:       mailtype.ProviderDetail{SMTPCode: 550, SMTPEnhancedCode: "5.1.1", HTTPStatus: 422, ErrorName: "validation_error"},
				FailoverFrom: "smtp"},
			`{"event_id":"%[1]s","event_type":"EmailFailed","version":1,"occurred_at":"%[2]s","dedupe_key":"order-confirmed:7:r2",` +
				`"data":{"order_id":"7","revision":2,"template":"order_confirmed","status":"failed","attempts":3,"provider":"resend",` +
				`"provider_message_id":"","source_event_id":"0190a0a0-0000-7000-8000-000000000001","error_class":"permanent",` +
				`"error_reason":"rejected","error":"550 \u003caddress\u003e unknown","provider_detail":{"smtp_code":550,"smtp_enhanced_code":"5.1.1",` +
				`"http_status":422,"error_name":"validation_error"},"failover_from":"smtp"}}`},
		{"bounced with its provider event",
			Feedback{Type: mailtype.EmailBounced, DedupeKey: "order-confirmed:9", OrderID: "9", Revision: 1, Template: "order_confirmed",
				Status: mailtype.StatusSent, Attempts: 1, Provider: "resend", ProviderMessageID: "re_1",
				ProviderEvent: &ProviderEvent{WebhookID: "msg_1", Type: "email.bounced", At: time.Date(2026, 9, 18, 8, 0, 0, 500, time.UTC),
					BounceType: "permanent", BounceSubtype: "Suppressed", Reason: "previous_bounce"},
				ReconciledBy: "provider_evidence"},
			`{"event_id":"%[1]s","event_type":"EmailBounced","version":1,"occurred_at":"%[2]s","dedupe_key":"order-confirmed:9",` +
				`"data":{"order_id":"9","revision":1,"template":"order_confirmed","status":"sent","attempts":1,"provider":"resend",` +
				`"provider_message_id":"re_1","provider_event":{"webhook_id":"msg_1","type":"email.bounced","at":"2026-09-18T08:00:00.0000005Z",` +
				`"bounce_type":"permanent","bounce_subtype":"Suppressed","reason":"previous_bounce"},"reconciled_by":"provider_evidence"}}`},
		{"cancelled, a text that JSON escapes",
			Feedback{Type: mailtype.EmailCancelled, DedupeKey: "order-confirmed:<&>", OrderID: "<&>", Revision: 3, Template: "order_confirmed",
				Status: mailtype.StatusCancelled},
			`{"event_id":"%[1]s","event_type":"EmailCancelled","version":1,"occurred_at":"%[2]s","dedupe_key":"order-confirmed:\u003c\u0026\u003e",` +
				`"data":{"order_id":"\u003c\u0026\u003e","revision":3,"template":"order_confirmed","status":"cancelled","attempts":0,"provider":"",` +
				`"provider_message_id":""}}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			before := time.Now().UTC()
			r, err := outboxRowOf(c.f)
			require.NoError(t, err)
			require.Equal(t, c.f.Type.RoutingKey(), r.routingKey)
			require.Equal(t, string(c.f.Type), r.eventType)
			require.Equal(t, c.f.OrderID, r.orderID)
			require.Equal(t, c.f.DedupeKey, r.dedupeKey)
			require.Equal(t, c.f.TraceContext, r.traceContext)
			require.EqualValues(t, 7, r.eventID.Version())
			require.False(t, r.createdAt.Before(before))
			occurred, err := json.Marshal(r.createdAt)
			require.NoError(t, err)
			require.Equal(t, fmt.Sprintf(c.want, r.eventID, string(occurred[1:len(occurred)-1])), r.payload)
		})
	}
}
