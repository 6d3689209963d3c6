package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// timelineAuditSQL reads the operator actions on one mail from the audit
// log (table audit_log, migration 00230), oldest first.
const timelineAuditSQL = `
SELECT at, actor, via, action, target, reason, result, COALESCE(detail::text, '')
FROM audit_log WHERE dedupe_key = $1 ORDER BY at, id`

// auditEntries are the operator actions on the mail with this key. A
// database without the audit log (a schema older than migration 00230)
// has none.
func auditEntries(ctx context.Context, q querier, key string) ([]TimelineEntry, error) {
	rows, err := q.Query(ctx, timelineAuditSQL, key)
	if sqlState(err) == sqlUndefinedTable {
		return nil, nil
	}
	out, err := scanRows(rows, err, fmt.Sprintf("the operator actions on mail %q", key), func(r pgx.CollectableRow) (TimelineEntry, error) {
		var e TimelineEntry
		var actor, via, action, target, reason, result, detail string
		err := r.Scan(&e.At, &actor, &via, &action, &target, &reason, &result, &detail)
		e.Kind, e.Summary = TimelineOperator, fmt.Sprintf("%s by %s (%s): %s", action, actor, via, AuditResultText(result))
		e.Detail = nonEmpty("actor", actor, "via", via, "action", action, "target", target, "reason", reason,
			"result", result, "detail", detail)
		return e, err
	})
	if sqlState(err) == sqlUndefinedTable {
		return nil, nil
	}
	return out, err
}
