package consumer

import (
	"time"

	"github.com/google/uuid"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
)

// Notices renders cancellation notices (template order_cancelled) for the
// store: when an OrderCancelled comes after its confirmation was, or may
// have been, delivered, the customer gets a mail saying the order is
// cancelled. It implements store.NoticeRenderer. Safe for concurrent use
// when Templates is.
type Notices struct {
	Templates Renderer
	// From is mail.from, used for a confirmation stored without its own
	// envelope; FromDomain is the domain of Message-IDs.
	From, FromDomain string
	// IdempotencyNamespace is the resolved mail.idempotency_namespace.
	IdempotencyNamespace string
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
}

// RenderNotice renders the notice of the confirmation src from the order
// as it was confirmed (src.Payload) and returns its pending mail, in the
// template's lane (priority unless its settings.yaml says otherwise): keyed
// mailtype.CancelNoticeKey, to the confirmation's address and display
// name, in its locale, with its envelope. The notice's age counts from
// now, when it became due. Errors are the renderer's (*mailtype.Error,
// permanent) or the payload's, which the consumer accepted once and so
// should never fail.
func (n *Notices) RenderNotice(src store.NoticeSource) (store.NewMail, error) {
	var d orderData
	if err := decodeJSON(src.Payload, &d, "stored payload"); err != nil {
		return store.NewMail{}, err
	}
	if d.Email == nil || d.Currency == nil {
		return store.NewMail{}, permanent(mailtype.ReasonMissingField, "stored payload of %s lacks email or currency", src.DedupeKey)
	}
	order := toOrder(src.OrderID, &d, src.ConfirmedAt.UTC())
	order.Email = src.ToEmail
	r, err := n.Templates.Render(mailtype.TemplateCancelNotice, src.Locale, order)
	if err != nil {
		return store.NewMail{}, asPermanent(err, mailtype.ReasonRender)
	}
	eventID := src.CancelEventID
	if eventID == "" {
		id, err := uuid.NewV7()
		if err != nil {
			return store.NewMail{}, err
		}
		eventID = id.String()
	}
	lane := mailtype.LanePriority
	if st, err := n.Templates.Settings(mailtype.TemplateCancelNotice); err == nil {
		lane = st.Lane
	}
	key := mailtype.CancelNoticeKey(src.OrderID, src.Revision)
	from, toName := src.From, src.ToName
	if from == "" {
		from, toName = n.From, r.ToName
	}
	return store.NewMail{
		EventID: eventID, DedupeKey: key, OrderID: src.OrderID, Revision: src.Revision,
		Template: mailtype.TemplateCancelNotice, Locale: r.Locale, ToEmail: src.ToEmail, Payload: src.Payload,
		Subject: r.Subject, BodyText: r.Text, BodyHTML: r.HTML, MessageID: mailtype.MessageID(key, n.FromDomain),
		From: from, ToName: toName, ReplyTo: src.ReplyTo,
		IdempotencyKey: mailtype.IdempotencyKey(n.IdempotencyNamespace, key), OccurredAt: n.now(), Lane: lane,
	}, nil
}

func (n *Notices) now() time.Time {
	if n.Now != nil {
		return n.Now()
	}
	return time.Now()
}

var _ store.NoticeRenderer = (*Notices)(nil)
