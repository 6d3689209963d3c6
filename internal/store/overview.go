package store

import (
	"context"
	"fmt"
	"time"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// Overview is the service at a glance, from the figures mailsvc keeps.
// Times are on the database's clock; Now is that clock at the read.
type Overview struct {
	Now time.Time `json:"now"`
	// Counts has every status of mailtype.Statuses, 0 when no mail has it.
	Counts map[mailtype.Status]int64 `json:"counts"`
	// OldestPending is when the oldest pending mail (not cancelled) was
	// received; nil when none is pending.
	OldestPending *time.Time `json:"oldest_pending,omitempty"`
	// LastHour: sends and delivery lag (event occurred to provider
	// accepted) over the last hour. SentLastHour counts the mails sent in
	// the hour that are still sent, FailedLastHour the failed mails whose
	// row last changed in it (a bounce of an older send included); the
	// lag percentiles are over the mails sent in the hour, 0 when none
	// was.
	SentLastHour   int64           `json:"sent_last_hour"`
	FailedLastHour int64           `json:"failed_last_hour"`
	LagP50         time.Duration   `json:"lag_p50_ns"`
	LagP95         time.Duration   `json:"lag_p95_ns"`
	Providers      []ProviderState `json:"providers"`
	// Outbox: feedback events not yet published, the oldest of them, and
	// the dead ones.
	OutboxUnpublished int64      `json:"outbox_unpublished"`
	OutboxOldest      *time.Time `json:"outbox_oldest,omitempty"`
	OutboxDead        int64      `json:"outbox_dead"`
	// Suppressions counts the suppression list's entries in force.
	Suppressions int64 `json:"suppressions"`
}

// overviewSQL reads every figure but the providers' in one statement, at a
// cost that does not grow with the finished mails kept: the counts are
// statsSQL's (partial indexes and the counters of migration 00100); the
// oldest pending mail reads mail_pending_due_idx; the last hour reads
// mail_finished_idx from an hour ago on, one row per mail finished since
// (its cost grows with the hour's throughput only); the outbox parts read
// its partial indexes of unpublished and dead rows; the suppression list
// is one row per bad address.
var overviewSQL = `
SELECT now(),
  ` + statusCountsSQL + `,
  (SELECT min(created_at) FROM mail WHERE status = 'pending' AND NOT cancel_requested),
  h.sent, h.failed, COALESCE(h.lag[1], 0), COALESCE(h.lag[2], 0),
  (SELECT count(*) FROM outbox WHERE published_at IS NULL AND dead_at IS NULL),
  (SELECT min(created_at) FROM outbox WHERE published_at IS NULL AND dead_at IS NULL),
  (SELECT count(*) FROM outbox WHERE dead_at IS NOT NULL),
  (SELECT count(*) FROM suppression WHERE ` + activeSuppression + `)
FROM (
  SELECT count(*) FILTER (WHERE status = 'sent' AND sent_at > now() - interval '1 hour') AS sent,
         count(*) FILTER (WHERE status = 'failed') AS failed,
         percentile_cont(ARRAY[0.5, 0.95]) WITHIN GROUP (ORDER BY extract(epoch FROM sent_at - COALESCE(occurred_at, created_at)))
             FILTER (WHERE status = 'sent' AND sent_at > now() - interval '1 hour') AS lag
  FROM mail WHERE status IN ('sent', 'failed', 'cancelled') AND updated_at > now() - interval '1 hour') h`

// Overview reads the service's figures: one statement for the mails, the
// outbox and the suppression list, one for the providers. It returns a
// transient *mailtype.Error (ReasonDatabase) when the database is
// unreachable. Safe for concurrent use.
func (s *Store) Overview(ctx context.Context) (Overview, error) {
	var o Overview
	var counts map[string]int64
	var p50, p95 float64
	err := s.pool.QueryRow(ctx, overviewSQL).Scan(&o.Now, &counts, &o.OldestPending, &o.SentLastHour, &o.FailedLastHour,
		&p50, &p95, &o.OutboxUnpublished, &o.OutboxOldest, &o.OutboxDead, &o.Suppressions)
	if err != nil {
		return Overview{}, fmt.Errorf("read the overview: %w", interpretError(err))
	}
	o.Counts = make(map[mailtype.Status]int64, len(mailtype.Statuses))
	for _, st := range mailtype.Statuses {
		o.Counts[st] = counts[string(st)]
	}
	o.LagP50, o.LagP95 = secondsToDuration(p50), secondsToDuration(p95)
	if o.Providers, err = s.ProviderStates(ctx); err != nil {
		return Overview{}, err
	}
	return o, nil
}
