package operator

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/mailsvc/mailsvc/internal/store"
)

// ActionDLQSkip is the audit log's name of `mailsvc dlq skip`: one
// dead-lettered message removed for good.
const ActionDLQSkip = "dlq-skip"

// MaxAuditBody is how many bytes of a skipped message's body its audit
// row keeps (the row's detail holds MaxAuditText bytes in all).
const MaxAuditBody = 600

// DeadLetter is one dead-lettered message a skip removes: its id
// (deadletter.EntryID), message_id, original routing key, reason and
// body.
type DeadLetter struct {
	ID, MessageID, RoutingKey, Reason string
	Body                              []byte
}

// SkipFunc removes the message a skip is about from the dead-letter queue
// and returns it; dry, it finds it and removes nothing. A message that is
// not there is NoDeadLetterError.
type SkipFunc func(ctx context.Context, dryRun bool) (DeadLetter, error)

// NoDeadLetterError is the refusal of an id no dead-lettered message
// has. It wraps store.ErrNotFound.
func NoDeadLetterError(id string) error {
	return &refusal{fmt.Sprintf("no dead-lettered message has id or message_id %q (list them with `mailsvc dlq list`)", id), store.ErrNotFound}
}

// AmbiguousDeadLetterError refuses a message_id that several
// dead-lettered messages carry: the skip must name one by its id.
func AmbiguousDeadLetterError(messageID string, ids []string) error {
	return &InputError{Problem: fmt.Sprintf("%d dead-lettered messages have this message_id", len(ids)), Input: messageID,
		Hint: "give the id of one of them: " + strings.Join(ids, ", ")}
}

// SkipDeadLetter removes the dead-lettered message id (of the queue
// a.DeadLetterQueue) for good through skip, and writes an audit row with
// its reason, routing key and the first MaxAuditBody bytes of its body. A
// reason is required through every door, the CLI's included: the message
// is gone afterwards. Dry, it finds it and removes nothing. Errors: see
// KindOf.
func (a *Actions) SkipDeadLetter(ctx context.Context, who Actor, id, reason string, dryRun bool, skip SkipFunc) (Result, error) {
	queue := a.DeadLetterQueue
	if queue == "" {
		queue = "dead-letter queue"
	}
	x := act{who: who, name: ActionDLQSkip, target: "dead letter " + id + " in " + queue, reason: reason, dryRun: dryRun}
	return a.run(ctx, x, func(string) (Result, error) {
		if strings.TrimSpace(reason) == "" && !dryRun {
			return Result{}, &InputError{Problem: ErrNoReason.Error() + " (a skipped message is gone for good)", Err: ErrNoReason}
		}
		l, err := skip(ctx, dryRun)
		if err != nil {
			return Result{}, err
		}
		what := fmt.Sprintf("dead letter %s (message_id=%s routing_key=%s reason=%s); its body, %d bytes: %s",
			l.ID, l.MessageID, l.RoutingKey, l.Reason, len(l.Body), BodyExcerpt(l.Body, MaxAuditBody))
		if dryRun {
			return Result{Summary: "would remove " + what + " (dry run: nothing changed)"}, nil
		}
		return Result{Summary: "removed for good " + what}, nil
	})
}

// BodyExcerpt is the first max bytes of body (on a character boundary)
// as a quoted Go string, with "..." after it when cut.
func BodyExcerpt(body []byte, max int) string {
	if len(body) <= max {
		return fmt.Sprintf("%q", body)
	}
	n := max
	for n > 0 && !utf8.RuneStart(body[n]) {
		n--
	}
	return fmt.Sprintf("%q...", body[:n])
}

// ReplayDeadLettersWhere is ReplayDeadLetters of the messages filter
// selects (deadletter.Filter's String, "" for all), named in the audit
// row's target.
func (a *Actions) ReplayDeadLettersWhere(ctx context.Context, who Actor, filter, reason string, dryRun bool) (Result, error) {
	queue := a.DeadLetterQueue
	if queue == "" {
		queue = "dead-letter queue"
	}
	if filter != "" {
		queue += " where " + filter
	}
	x := act{who: who, name: ActionDLQReplay, target: queue, reason: reason, dryRun: dryRun}
	return a.run(ctx, x, func(string) (Result, error) {
		if a.ReplayDLQ == nil {
			return Result{}, ErrNoBroker
		}
		summary, err := a.ReplayDLQ(ctx, dryRun)
		if summary == "" && err != nil {
			summary = "nothing replayed"
		}
		return Result{Summary: summary}, err
	})
}
