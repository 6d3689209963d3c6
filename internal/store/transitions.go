package store

import "github.com/mailsvc/mailsvc/internal/mailtype"

// Transition is one change of a mail's status (docs/design.md, "State
// machine") and the statement of this package that makes it.
type Transition struct {
	// From is the status before; "" for a row the statement inserts.
	From mailtype.Status
	// To is the status after. It equals From only for the claim's silent
	// reclaim, which writes the status again with a new token.
	To mailtype.Status
	// Statement is the Go const that holds the statement or, for SQL
	// written inline, the function that runs it.
	Statement string
	// By says what runs the statement, and when it makes this transition.
	By string
}

// transitions is the index of every status transition of a mail, grouped
// by statement. TestTransitionsIndex (transitions_test.go) keeps it true:
// it parses this package's SQL and fails when a statement that writes
// mail.status is missing here, when a statement named here no longer
// writes it, when a statement whose statuses are literals writes one this
// index does not list for it, and when the table in docs/design.md,
// generated from this index, differs. The statuses of finishUpdateSQL,
// insertMailsSQL and insertLimitedMailsSQL are computed in Go (an
// Outcome, an ingested mail's status), so for those three the "to" side
// is checked by their own tests, not by the parser.
var transitions = []Transition{
	// Ingest: a new row per mail, pending or, past its max age, failed.
	{"", mailtype.StatusPending, "insertMailsSQL", "an `OrderConfirmed`; a cancellation notice"},
	{"", mailtype.StatusFailed, "insertMailsSQL", "an `OrderConfirmed` older than its max age (`stale`)"},
	{"", mailtype.StatusSending, "insertMailsSQL", "an `OrderConfirmed` leased to its own process's sender as it is written (handed over in memory)"},
	{"", mailtype.StatusPending, "insertLimitedMailsSQL", "an `OrderConfirmed` within `mail.recipient_limit`"},
	{"", mailtype.StatusHeld, "insertLimitedMailsSQL", "an `OrderConfirmed` over `mail.recipient_limit`"},
	{"", mailtype.StatusFailed, "insertLimitedMailsSQL", "an `OrderConfirmed` older than its max age (`stale`)"},
	{"", mailtype.StatusSending, "insertLimitedMailsSQL", "an `OrderConfirmed` within `mail.recipient_limit`, leased to its own process's sender (handed over in memory)"},
	{"", mailtype.StatusFailed, "insertFailedNoticeSQL", "a cancellation notice that could not be rendered"},
	{"", mailtype.StatusPending, "insertResendSQL", "`mail resend` (a new row `KEY:resend:N`)"},

	// A cancel at ingest.
	{"", mailtype.StatusCancelled, "cancelSQL", "an `OrderCancelled` before its confirmation: the tombstone"},
	{mailtype.StatusPending, mailtype.StatusCancelled, "cancelSQL", "an `OrderCancelled`"},
	{mailtype.StatusHeld, mailtype.StatusCancelled, "cancelSQL", "an `OrderCancelled`"},
	{mailtype.StatusPending, mailtype.StatusUnknown, "cancelSQL", "an `OrderCancelled` of a mail whose earlier send was ambiguous"},

	// The sender.
	{mailtype.StatusPending, mailtype.StatusSending, "claimSQL", "the claim"},
	{mailtype.StatusSending, mailtype.StatusSending, "claimSQL", "the silent reclaim of an expired claim that never started a send"},
	{mailtype.StatusSending, mailtype.StatusSent, "finishUpdateSQL", "the fenced outcome write: the provider accepted it"},
	{mailtype.StatusSending, mailtype.StatusPending, "finishUpdateSQL", "the fenced outcome write: a retried error, a rate limit or pause, a release; the janitor's verdict"},
	{mailtype.StatusSending, mailtype.StatusFailed, "finishUpdateSQL", "the fenced outcome write: a permanent error, sends exhausted, stale or suppressed; the janitor's verdict"},
	{mailtype.StatusSending, mailtype.StatusUnknown, "finishUpdateSQL", "the fenced outcome write: an ambiguous outcome not retried, or a release or failure after one; the janitor's verdict"},
	{mailtype.StatusSending, mailtype.StatusCancelled, "finishUpdateSQL", "the fenced outcome write: a release or failure of a mail whose cancel was requested"},
	{mailtype.StatusPending, mailtype.StatusSent, "finishUpdateSQL", "the owner's late write of the provider's answer after the janitor's verdict (same token)"},
	{mailtype.StatusPending, mailtype.StatusFailed, "finishUpdateSQL", "the owner's late write of the provider's answer after the janitor's verdict (same token)"},
	{mailtype.StatusUnknown, mailtype.StatusSent, "finishUpdateSQL", "the owner's late write of the provider's answer after the janitor's verdict (same token)"},
	{mailtype.StatusUnknown, mailtype.StatusFailed, "finishUpdateSQL", "the owner's late write of the provider's answer after the janitor's verdict (same token)"},

	// Attachments.
	{mailtype.StatusPending, mailtype.StatusFailed, "failAttachSQL", "a required attachment that could not be had"},
	{mailtype.StatusHeld, mailtype.StatusFailed, "failAttachSQL", "a required attachment that could not be had"},

	// Operators.
	{mailtype.StatusHeld, mailtype.StatusPending, "releaseHeldSQL", "`mail release`"},
	{mailtype.StatusHeld, mailtype.StatusCancelled, "cancelHeldSQL", "`mail cancel-held`"},
	{mailtype.StatusUnknown, mailtype.StatusSent, "reconcileSQL", "`mail reconcile --delivered`"},
	{mailtype.StatusUnknown, mailtype.StatusPending, "reconcileSQL", "`mail reconcile --not-delivered`"},
	{mailtype.StatusUnknown, mailtype.StatusCancelled, "reconcileSQL", "`mail reconcile --not-delivered` of a mail whose order was cancelled"},

	// The providers' reports.
	{mailtype.StatusUnknown, mailtype.StatusSent, "settleUnknownSQL", "a provider's report that proves it took the mail (webhook or DSN)"},
	{mailtype.StatusSent, mailtype.StatusFailed, "failSent", "a provider's report of a bounce or failure (webhook or DSN)"},
}
