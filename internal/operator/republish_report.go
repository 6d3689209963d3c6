package operator

import (
	"fmt"
	"time"

	"github.com/mailsvc/mailsvc/internal/store"
)

// RepublishFields are the lines `mailsvc mail show` adds for m's
// published feedback events: until when each can be published again with
// `mailsvc outbox republish` (its publication plus keptFor, the
// retention.window after which the relay deletes it), judged at now. An
// event not published yet has no line (the relay publishes it); keptFor 0
// keeps them for good.
func RepublishFields(m store.MailView, keptFor time.Duration, now time.Time) []Field {
	var out []Field
	cmd := "`mailsvc outbox republish --order " + m.OrderID + "`"
	for _, f := range m.Feedback {
		if f.PublishedAt == nil {
			continue
		}
		v := fmt.Sprintf("%s %s: can be published again for good (retention.window 0); %s", f.EventType, f.EventID, cmd)
		if keptFor > 0 {
			until := f.PublishedAt.Add(keptFor)
			v = fmt.Sprintf("%s %s: can be published again until %s (retention.window %s); %s", f.EventType, f.EventID, Stamp(&until), keptFor, cmd)
			if !now.Before(until) {
				v = fmt.Sprintf("%s %s: past retention.window (%s) since %s: it can no longer be published again", f.EventType, f.EventID, keptFor, Stamp(&until))
			}
		}
		out = append(out, Field{"republish", v})
	}
	return out
}
