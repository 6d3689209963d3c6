package store

import (
	"context"
	"errors"
	"time"
)

// TimelineKind names what a TimelineEntry records.
type TimelineKind string

// The kinds of a mail's timeline, in the order a mail meets them.
const (
	TimelineReceived TimelineKind = "received" // the input event was stored
	TimelineAttempt  TimelineKind = "attempt"  // a claim and send, with the provider's reply
	TimelineOutcome  TimelineKind = "outcome"  // the status the mail reached
	TimelineFeedback TimelineKind = "feedback" // a feedback event written, and its publication
	TimelineReport   TimelineKind = "report"   // a provider report (webhook or DSN)
	TimelineOperator TimelineKind = "operator" // an operator action (audit log)
)

// TimelineEntry is one moment of a mail's story.
type TimelineEntry struct {
	At      time.Time         `json:"at"`
	Kind    TimelineKind      `json:"kind"`
	Summary string            `json:"summary"`
	Detail  map[string]string `json:"detail,omitempty"`
}

// MailTimeline returns the story of the mail with this dedupe key, oldest
// first. ErrNotFound when no mail has the key.
func (s *Store) MailTimeline(ctx context.Context, dedupeKey string) ([]TimelineEntry, error) {
	return nil, errors.New("mail timeline: not implemented")
}

// MailContent is the rendered mail as stored and sent: every attempt
// sends these bytes.
type MailContent struct {
	DedupeKey string `json:"dedupe_key"`
	From      string `json:"from"`
	To        string `json:"to"`
	ToName    string `json:"to_name,omitempty"`
	ReplyTo   string `json:"reply_to,omitempty"`
	Subject   string `json:"subject"`
	MessageID string `json:"message_id"`
	Text      string `json:"text"`
	HTML      string `json:"html"`
}

// MailContentByKey returns the rendered mail with this dedupe key.
// ErrNotFound when no mail has the key.
func (s *Store) MailContentByKey(ctx context.Context, dedupeKey string) (MailContent, error) {
	return MailContent{}, errors.New("mail content: not implemented")
}
