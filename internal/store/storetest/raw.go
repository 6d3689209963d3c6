package storetest

import (
	"context"
	"fmt"

	"github.com/mailsvc/mailsvc/internal/store"
)

// RawMail is one row of the consumer benchmark's raw baseline.
type RawMail struct {
	EventID, DedupeKey string
	Payload            []byte
}

const insertRawSQL = `
INSERT INTO mail (event_id, dedupe_key, order_id, template, status, payload)
SELECT e, k, '', 'raw', 'pending', p::jsonb
FROM unnest($1::uuid[], $2::text[], $3::text[]) AS u(e, k, p)
ON CONFLICT DO NOTHING`

// InsertRaw inserts rows with one multi-row INSERT ... ON CONFLICT DO
// NOTHING (one autocommit statement): the raw baseline the consumer's
// benchmark compares Ingest with (consume, insert, ack, no validation, no
// rendering).
func InsertRaw(ctx context.Context, st *store.Store, rows []RawMail) error {
	ids, keys, payloads := make([]string, len(rows)), make([]string, len(rows)), make([]string, len(rows))
	for i, r := range rows {
		ids[i], keys[i], payloads[i] = r.EventID, r.DedupeKey, string(r.Payload)
	}
	if _, err := st.TestSupport().Pool.Exec(ctx, insertRawSQL, ids, keys, payloads); err != nil {
		return fmt.Errorf("insert raw mails: %w", err)
	}
	return nil
}
