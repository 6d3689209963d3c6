package operator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mailsvc/mailsvc/internal/mailtype"
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
// exactly alike, and each writes one audit row: started before it runs
// (store.RecordAudit), its result when it ends (store.FinishAudit). dryRun decides and refuses as the action would and changes
// nothing (no audit row): the console's confirmation step shows it.
// Once its fields are set it is safe for concurrent use.
type Actions struct {
	Store *store.Store
	// FromDomain is the domain of mail.from (a resend's Message-ID);
	// Namespace the configured mail.idempotency_namespace ("" for the
	// stored one).
	FromDomain, Namespace string
	// ReplayDLQ replays the dead-letter queue (dryRun: only counts); nil
	// where no broker is configured, and the action is refused.
	ReplayDLQ func(ctx context.Context, dryRun bool) (string, error)
	// DeadLetterQueue names the queue ReplayDLQ empties, the target of
	// its audit rows; "" reads "dead-letter queue".
	DeadLetterQueue string
	// Notices gives the resend notice of a template and locale
	// (templates.Registry.ResendNotice); nil refuses ResendWith's Notice.
	Notices func(template, locale string) (string, error)
}

// Result is what an action did (or, dry, would do), in one sentence, and
// the new mail's key of a resend.
type Result struct {
	Summary string `json:"summary"`
	NewKey  string `json:"new_key,omitempty"`
	// Audit is the action's audit row as its end recorded it; nil on a
	// dry run, which records nothing.
	Audit *store.AuditEntry `json:"audit,omitempty"`
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

// KindOf returns the kind of err: KindInvalid for an *InputError (or an
// address or a query the store refuses: store.ErrInvalidAddress,
// store.ErrBadQuery), KindNotFound for a mail, suppression entry
// or provider that does not exist (store.ErrNotFound, ErrNoProvider),
// KindRefused for a state that forbids the action (*store.StateError,
// ErrNoBroker), KindUnavailable for a database that failed
// (mailtype.ReasonDatabase), KindOther for anything else and nil.
func KindOf(err error) Kind {
	switch {
	case err == nil:
		return KindOther
	case errors.Is(err, ErrInvalidInput), errors.Is(err, store.ErrInvalidAddress), errors.Is(err, store.ErrBadQuery):
		return KindInvalid
	case errors.Is(err, store.ErrNotFound), errors.Is(err, ErrNoProvider):
		return KindNotFound
	case errors.Is(err, store.ErrWrongState), errors.Is(err, ErrNoBroker):
		return KindRefused
	case mailtype.ReasonOf(err) == mailtype.ReasonDatabase:
		return KindUnavailable
	}
	return KindOther
}

// ErrNoProvider is wrapped by the refusal of a provider name other than
// smtp and resend.
var ErrNoProvider = errors.New("no such provider")

// ErrNoBroker refuses a dead-letter replay where no broker is configured
// (Actions.ReplayDLQ is nil).
var ErrNoBroker = errors.New("no broker configured to replay the dead-letter queue from")

// ErrNoReason refuses an action through the console or the API without a
// reason: the audit log keeps why. The CLI may omit it (scripts written
// before the audit log); its rows then read "(no reason given)".
var ErrNoReason = errors.New("a reason is required: say why, for the audit log")

// The actions as the audit log names them (AuditEntry.Action; the closed
// set is store.AuditActions).
const (
	ActionResend         = "resend"
	ActionReconcile      = "reconcile"
	ActionProviderResume = "provider-resume"
	ActionSuppress       = "suppression-add"
	ActionUnsuppress     = "suppression-remove"
	ActionDLQReplay      = "dlq-replay"
)

// act is one action's frame: what, on what, why.
type act struct {
	who     Actor
	name    string
	target  string // as given; normalised by norm
	reason  string
	dryRun  bool
	norm    func(string) (string, error) // nil: taken as given
	mailKey bool                         // the target is a dedupe key: the row appears on the mail
}

// auditTimeout bounds writing an action's result into its audit row.
const auditTimeout = 10 * time.Second

// run normalises x's target, refuses a missing reason and, unless dry,
// writes the action's intent row (result started) before do runs on the
// normalised target, then sets the row's result: done, refused (bad
// input, not found, a state that forbids it) or failed (the database,
// anything unexpected), the summary or the error's text as its detail. A
// process that stops in between leaves a started row, never an action
// without a row. An intent row that cannot be written stops the action
// (its error, KindUnavailable); an action that ran but whose result could
// not be written returns its result and an error saying so.
func (a *Actions) run(ctx context.Context, x act, do func(target string) (Result, error)) (Result, error) {
	if !slices.Contains([]string{store.ViaCLI, store.ViaConsole, store.ViaAPI}, x.who.Via) || strings.TrimSpace(x.who.Name) == "" {
		return Result{}, fmt.Errorf("%s: actor %q via %q: a name and cli, console or api are required", x.name, x.who.Name, x.who.Via)
	}
	who, err := Text("an actor's name", x.who.Name)
	if err != nil {
		return Result{}, err
	}
	x.who.Name = who
	reason, reasonErr := Text("a reason", x.reason)
	x.reason = reason
	target, err := x.target, error(nil)
	if x.norm != nil {
		target, err = x.norm(x.target)
	}
	switch {
	case err != nil && x.dryRun:
		return Result{}, err
	case err != nil: // not what the action takes: on no mail
		x.mailKey = false
		return a.refuse(ctx, x, x.target, err)
	case reasonErr != nil && x.dryRun:
		return Result{}, reasonErr
	case reasonErr != nil:
		return a.refuse(ctx, x, target, reasonErr)
	case x.dryRun:
		return do(target)
	case x.reason == "" && x.who.Via != store.ViaCLI:
		return a.refuse(ctx, x, target, &InputError{Problem: ErrNoReason.Error(), Err: ErrNoReason})
	}
	rec, err := a.Store.RecordAudit(ctx, x.entry(target, store.AuditStarted, ""))
	if err != nil {
		return Result{}, fmt.Errorf("%s: nothing done: its audit row could not be written: %w", x.name, err)
	}
	res, err := do(target)
	return a.finish(ctx, rec.ID, res, err)
}

// entry is x's audit row on target with result and detail.
func (x act) entry(target, result, detail string) store.AuditEntry {
	e := store.AuditEntry{Actor: strings.TrimSpace(x.who.Name), Via: x.who.Via, Action: x.name, Target: target,
		Reason: x.reason, Result: result, Detail: detail}
	if x.mailKey {
		e.DedupeKey = target
	}
	return e
}

// resultOf is the audit result and detail of what an action did. A
// failed action that did part of its work (a dead-letter replay cut
// short) keeps its summary, what was done, before the error.
func resultOf(res Result, err error) (string, string) {
	if err == nil {
		return store.AuditDone, res.Summary
	}
	detail := err.Error()
	if res.Summary != "" {
		detail = res.Summary + "; error: " + detail
	}
	if k := KindOf(err); k == KindInvalid || k == KindNotFound || k == KindRefused {
		return store.AuditRefused, detail
	}
	return store.AuditFailed, detail
}

// writeCtx is the context a result is written under: the action is done
// (or refused) whatever the caller does next, so its row is written even
// when the caller's context ends now.
func writeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), auditTimeout)
}

// refuse writes the finished row of an action refused before it ran.
func (a *Actions) refuse(ctx context.Context, x act, target string, err error) (Result, error) {
	wctx, cancel := writeCtx(ctx)
	defer cancel()
	result, detail := resultOf(Result{}, err)
	if rec, aerr := a.Store.RecordAudit(wctx, x.entry(target, result, detail)); aerr == nil {
		return Result{Audit: &rec}, err
	}
	return Result{}, err
}

// finish sets the result of the started row id from the action's res and
// err.
func (a *Actions) finish(ctx context.Context, id int64, res Result, err error) (Result, error) {
	wctx, cancel := writeCtx(ctx)
	defer cancel()
	result, detail := resultOf(res, err)
	rec, aerr := a.Store.FinishAudit(wctx, id, result, detail)
	switch {
	case aerr == nil:
		res.Audit = &rec
	case err == nil:
		return res, fmt.Errorf("%s; but its result could not be written to its audit row %d (left started): %w", res.Summary, id, aerr)
	}
	return res, err
}
