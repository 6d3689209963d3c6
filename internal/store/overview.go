package store

import (
	"context"
	"errors"
	"time"

	"github.com/mailsvc/mailsvc/internal/mailtype"
)

// Overview is the service at a glance, from the figures mailsvc keeps.
type Overview struct {
	Now           time.Time                 `json:"now"`
	Counts        map[mailtype.Status]int64 `json:"counts"`
	OldestPending *time.Time                `json:"oldest_pending,omitempty"`
	// LastHour: sends and delivery lag (event occurred to provider
	// accepted) over the last hour.
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
	Suppressions      int64      `json:"suppressions"`
}

// Overview reads the service's figures.
func (s *Store) Overview(ctx context.Context) (Overview, error) {
	return Overview{}, errors.New("overview: not implemented")
}
