package store

import (
	"context"
	"fmt"
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

// InsertRawForBench inserts rows with one multi-row INSERT ... ON CONFLICT
// DO NOTHING (one autocommit statement): the raw baseline the consumer's
// benchmark compares Ingest with (consume, insert, ack, no validation, no
// rendering). It exists for that benchmark only.
func (s *Store) InsertRawForBench(ctx context.Context, rows []RawMail) error {
	ids, keys, payloads := make([]string, len(rows)), make([]string, len(rows)), make([]string, len(rows))
	for i, r := range rows {
		ids[i], keys[i], payloads[i] = r.EventID, r.DedupeKey, string(r.Payload)
	}
	if _, err := s.pool.Exec(ctx, insertRawSQL, ids, keys, payloads); err != nil {
		return fmt.Errorf("insert raw mails: %w", interpretError(err))
	}
	return nil
}
