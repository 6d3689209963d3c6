package operator

import (
	"context"
	"errors"

	"github.com/mailsvc/mailsvc/internal/store"
)

// Actor is who takes an operator action, and through which door: Via is
// "cli", "console" or "api". Every action is written to the audit log
// under this name.
type Actor struct {
	Name, Via string
}

// Actions is every operator action that changes something (resend,
// reconcile, provider resume, suppression add and remove, dead-letter
// replay): one implementation, so the CLI, the console and its API refuse
// exactly alike, and each writes one audit row (store.RecordAudit) with
// its result. dryRun decides and refuses as the action would and changes
// nothing (no audit row): the console's confirmation step shows it.
type Actions struct {
	Store *store.Store
	// FromDomain is the domain of mail.from (a resend's Message-ID);
	// Namespace the configured mail.idempotency_namespace ("" for the
	// stored one).
	FromDomain, Namespace string
	// ReplayDLQ replays the dead-letter queue (dryRun: only counts); nil
	// where no broker is configured, and the action is refused.
	ReplayDLQ func(ctx context.Context, dryRun bool) (string, error)
}

// Result is what an action did (or, dry, would do), in one sentence, and
// the new mail's key of a resend.
type Result struct {
	Summary string           `json:"summary"`
	NewKey  string           `json:"new_key,omitempty"`
	Audit   store.AuditEntry `json:"audit"`
}

// Kind sorts an action's error for its door: the CLI's exit code, the
// API's status.
type Kind int

// The kinds of KindOf.
const (
	KindOther       Kind = iota // an unexpected error: exit 1, 500
	KindInvalid                 // the input cannot mean anything: exit 2, 400
	KindNotFound                // no such mail, address or provider: exit 3, 404
	KindRefused                 // the state does not allow it: exit 4, 409
	KindUnavailable             // the database or broker: exit 5, 503
)

// KindOf returns the kind of err.
func KindOf(err error) Kind { return KindOther }

var errNotImplemented = errors.New("not implemented")

// Resend sends a new copy of the mail key (store.Resend's rules).
func (a *Actions) Resend(ctx context.Context, who Actor, key, reason string, dryRun bool) (Result, error) {
	return Result{}, errNotImplemented
}

// Reconcile settles the unknown mail key as delivered or not.
func (a *Actions) Reconcile(ctx context.Context, who Actor, key string, delivered bool, reason string, dryRun bool) (Result, error) {
	return Result{}, errNotImplemented
}

// ResumeProvider ends the provider's pause now.
func (a *Actions) ResumeProvider(ctx context.Context, who Actor, provider, reason string, dryRun bool) (Result, error) {
	return Result{}, errNotImplemented
}

// Suppress adds address to the suppression list.
func (a *Actions) Suppress(ctx context.Context, who Actor, address, reason string, dryRun bool) (Result, error) {
	return Result{}, errNotImplemented
}

// Unsuppress removes address from the suppression list.
func (a *Actions) Unsuppress(ctx context.Context, who Actor, address, reason string, dryRun bool) (Result, error) {
	return Result{}, errNotImplemented
}

// ReplayDeadLetters replays the dead-letter queue.
func (a *Actions) ReplayDeadLetters(ctx context.Context, who Actor, reason string, dryRun bool) (Result, error) {
	return Result{}, errNotImplemented
}
