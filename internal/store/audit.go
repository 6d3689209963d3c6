package store

import (
	"context"
	"errors"
	"time"
)

// AuditEntry is one operator action as the audit log keeps it: who, when,
// through what, what on which target, why, and the result.
type AuditEntry struct {
	ID        int64     `json:"id"`
	At        time.Time `json:"at"`
	Actor     string    `json:"actor"`
	Via       string    `json:"via"`                  // cli, console or api
	Action    string    `json:"action"`               // resend, reconcile, provider-resume, suppression-add, ...
	Target    string    `json:"target"`               // a dedupe key, an address, a provider, a queue
	DedupeKey string    `json:"dedupe_key,omitempty"` // the mail it appears on, if any
	Reason    string    `json:"reason"`
	Result    string    `json:"result"` // done, refused, failed
	Detail    string    `json:"detail,omitempty"`
}

// AuditQuery selects audit entries, the newest first.
type AuditQuery struct {
	DedupeKey, Actor, Action, Target string
	Since                            time.Time
	Limit                            int
}

// RecordAudit appends e (its ID and At are set by the database).
func (s *Store) RecordAudit(ctx context.Context, e AuditEntry) (AuditEntry, error) {
	return AuditEntry{}, errors.New("record audit: not implemented")
}

// ListAudit returns the entries of q.
func (s *Store) ListAudit(ctx context.Context, q AuditQuery) ([]AuditEntry, error) {
	return nil, errors.New("list audit: not implemented")
}
