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
// exactly alike, and each writes one audit row (store.RecordAudit) with
// its result. dryRun decides and refuses as the action would and changes
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

// KindOf returns the kind of err: KindInvalid for an *InputError (or an
// address the store refuses), KindNotFound for a mail, suppression entry
// or provider that does not exist (store.ErrNotFound, ErrNoProvider),
// KindRefused for a state that forbids the action (*store.StateError,
// ErrNoBroker), KindUnavailable for a database that failed
// (mailtype.ReasonDatabase), KindOther for anything else and nil.
func KindOf(err error) Kind {
	switch {
	case err == nil:
		return KindOther
	case errors.Is(err, ErrInvalidInput), errors.Is(err, store.ErrInvalidAddress):
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

// The actions as the audit log names them (AuditEntry.Action).
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

// auditTimeout bounds writing an audit row.
const auditTimeout = 10 * time.Second

// run normalises x's target, refuses a missing reason, runs do on the
// normalised target and, unless dry, writes one audit row with the
// outcome: done, refused (bad input, not found, a state that forbids it)
// or failed (the database, anything unexpected), the error's text as its
// detail. An action that succeeded but whose row could not be written
// returns its result and an error saying so (KindUnavailable).
func (a *Actions) run(ctx context.Context, x act, do func(target string) (Result, error)) (Result, error) {
	if !slices.Contains([]string{store.ViaCLI, store.ViaConsole, store.ViaAPI}, x.who.Via) || strings.TrimSpace(x.who.Name) == "" {
		return Result{}, fmt.Errorf("%s: actor %q via %q: a name and cli, console or api are required", x.name, x.who.Name, x.who.Via)
	}
	x.reason = strings.TrimSpace(x.reason)
	target, err := x.target, error(nil)
	if x.norm != nil {
		target, err = x.norm(x.target)
	}
	var res Result
	switch {
	case err != nil:
		target, x.mailKey = x.target, false
	case !x.dryRun && x.reason == "" && x.who.Via != store.ViaCLI:
		err = &InputError{Problem: ErrNoReason.Error(), Err: ErrNoReason}
	default:
		res, err = do(target)
	}
	if x.dryRun {
		return res, err
	}
	return a.audit(ctx, x, target, res, err)
}

// audit writes the row of an action that ran (or was refused) with res
// and err.
func (a *Actions) audit(ctx context.Context, x act, target string, res Result, err error) (Result, error) {
	e := store.AuditEntry{Actor: strings.TrimSpace(x.who.Name), Via: x.who.Via, Action: x.name, Target: target,
		Reason: x.reason, Result: store.AuditDone, Detail: res.Summary}
	if x.mailKey && !errors.Is(err, store.ErrNotFound) {
		e.DedupeKey = target
	}
	if err != nil {
		e.Result, e.Detail = store.AuditFailed, err.Error()
		if k := KindOf(err); k == KindInvalid || k == KindNotFound || k == KindRefused {
			e.Result = store.AuditRefused
		}
	}
	// The action is done (or refused) whatever the caller does next: its
	// row is written even when the caller's context ends now.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditTimeout)
	defer cancel()
	rec, aerr := a.Store.RecordAudit(wctx, e)
	switch {
	case aerr == nil:
		res.Audit = rec
	case err == nil:
		return res, fmt.Errorf("%s; but its audit row could not be written: %w", res.Summary, aerr)
	}
	return res, err
}
