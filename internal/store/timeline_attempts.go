package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// timelineAttemptsSQL reads the sends mail_attempt keeps for a mail
// (migration 00250), oldest first.
const timelineAttemptsSQL = `
SELECT at, claim, send, started_at, status, COALESCE(provider, ''), COALESCE(provider_message_id, ''),
    COALESCE(error, ''), COALESCE(error_class, '')
FROM mail_attempt WHERE mail_id = $1 ORDER BY id`

// attemptEntries are the sends mail_attempt keeps for the mail with this
// id: each at the time its outcome was written.
func attemptEntries(ctx context.Context, tx dbtx, id int64) ([]TimelineEntry, error) {
	rows, err := tx.Query(ctx, timelineAttemptsSQL, id)
	return scanRows(rows, err, "the sends of a mail", func(r pgx.CollectableRow) (TimelineEntry, error) {
		var claim, send int
		var started *time.Time
		var status, provider, pmid, errText, class string
		e := TimelineEntry{Kind: TimelineAttempt}
		err := r.Scan(&e.At, &claim, &send, &started, &status, &provider, &pmid, &errText, &class)
		e.Detail = nonEmpty("claim", fmt.Sprint(claim), "send", fmt.Sprint(send), "status", status, "provider", provider,
			"provider_message_id", pmid, "error", errText, "error_class", class)
		switch {
		case started == nil:
			e.Summary = fmt.Sprintf("claim %d released unsent: back to %s", claim, status)
		case pmid != "" && status == "sent":
			e.Summary = fmt.Sprintf("send %d: %s accepted the mail as %s", send, provider, pmid)
		default:
			e.Summary = fmt.Sprintf("send %d through %s: %s: %s", send, provider, status, errText)
		}
		if started != nil {
			e.Detail["started_at"] = started.UTC().Format(time.RFC3339Nano)
		}
		return e, err
	})
}
