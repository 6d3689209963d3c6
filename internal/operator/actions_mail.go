package operator

import (
	"context"
	"errors"
	"fmt"

	"github.com/mailsvc/mailsvc/internal/store"
	"github.com/mailsvc/mailsvc/internal/templates"
)

// refusal is an error whose text is the whole message, wrapping a
// sentinel (store.ErrNotFound, ErrNoProvider) for KindOf.
type refusal struct {
	msg string
	err error
}

func (r *refusal) Error() string { return r.msg }
func (r *refusal) Unwrap() error { return r.err }

// NoMailError is the refusal of a dedupe key no mail has. It wraps
// store.ErrNotFound.
func NoMailError(key string) error {
	return &refusal{fmt.Sprintf("no mail has dedupe key %q (list an order's mails with `mailsvc mail show --order ID`)", key), store.ErrNotFound}
}

// mailError is the error of a store action on the mail key: a
// *store.StateError as it is (its text is the refusal), ErrNotFound as
// NoMailError, anything else unchanged.
func mailError(key string, err error) error {
	var se *store.StateError
	switch {
	case errors.As(err, &se):
		return se
	case errors.Is(err, store.ErrNotFound):
		return NoMailError(key)
	}
	return err
}

// Resend is ResendWith without options.
func (a *Actions) Resend(ctx context.Context, who Actor, key, reason string, dryRun bool) (Result, error) {
	return a.ResendWith(ctx, who, key, reason, dryRun, ResendOptions{})
}

// ResendOptions change what a resend's copy says.
type ResendOptions struct {
	// Notice starts the copy with the resend notice of its template and
	// language ("If you already received this e-mail, please ignore
	// it."), in its text and HTML parts (templates.AddResendNotice). The
	// subject is unchanged. It needs Actions.Notices.
	Notice bool
}

// ResendWith sends a new copy of the mail key (store.Resend's rules: a
// sent or failed mail, not of a cancelled order, not to a suppressed
// address, no other mail of its resend family in flight), with o's
// changes written into the copy once (it is stored, and each of its
// attempts sends the same bytes). The key is normalised by Key. Dry, it
// runs the same transaction and rolls it back, so it refuses exactly
// alike and names the key the copy would get. Result.NewKey is the copy's
// key. Errors: see KindOf; a Notice without Actions.Notices is refused.
func (a *Actions) ResendWith(ctx context.Context, who Actor, key, reason string, dryRun bool, o ResendOptions) (Result, error) {
	x := act{who: who, name: ActionResend, target: key, reason: reason, dryRun: dryRun, norm: Key, mailKey: true}
	return a.run(ctx, x, func(key string) (Result, error) {
		edit, err := a.resendEdit(o)
		if err != nil {
			return Result{}, err
		}
		ns, err := a.Store.IdempotencyNamespace(ctx, a.Namespace)
		if err != nil {
			return Result{}, err
		}
		resend := a.Store.ResendEdited
		if dryRun {
			resend = a.Store.ResendEditedDryRun
		}
		newKey, err := resend(ctx, key, a.FromDomain, ns, edit)
		if err != nil {
			return Result{}, mailError(key, err)
		}
		with := ""
		if o.Notice {
			with = " with the resend notice"
		}
		if dryRun {
			return Result{NewKey: newKey, Summary: fmt.Sprintf("would create %s (pending) as a copy of %s%s (dry run: nothing changed)", newKey, key, with)}, nil
		}
		return Result{NewKey: newKey, Summary: fmt.Sprintf("created %s (pending) as a copy of %s%s; follow it with `mailsvc mail show %s`", newKey, key, with, newKey)}, nil
	})
}

// ErrNoNotices refuses a resend notice where no templates are loaded
// (Actions.Notices is nil).
var ErrNoNotices = errors.New("no templates loaded to take the resend notice from")

// resendEdit is the store edit of o, nil for none.
func (a *Actions) resendEdit(o ResendOptions) (store.ResendEdit, error) {
	if !o.Notice {
		return nil, nil
	}
	if a.Notices == nil {
		return nil, ErrNoNotices
	}
	return func(template, locale, text, html string) (string, string, error) {
		line, err := a.Notices(template, locale)
		if err != nil {
			return "", "", err
		}
		text, html = templates.AddResendNotice(text, html, line)
		return text, html, nil
	}, nil
}

// Reconcile settles the unknown mail key as delivered or not
// (store.Reconcile; dry, store.ReconcileDryRun, the same transaction
// rolled back). The key is normalised by Key. Result.Summary is
// ReconcileLine's line. Errors: see KindOf.
func (a *Actions) Reconcile(ctx context.Context, who Actor, key string, delivered bool, reason string, dryRun bool) (Result, error) {
	res, _, err := a.reconcile(ctx, who, key, delivered, reason, dryRun)
	return res, err
}

func (a *Actions) reconcile(ctx context.Context, who Actor, key string, delivered bool, reason string, dryRun bool) (Result, store.ReconcileResult, error) {
	var got store.ReconcileResult
	x := act{who: who, name: ActionReconcile, target: key, reason: reason, dryRun: dryRun, norm: Key, mailKey: true}
	res, err := a.run(ctx, x, func(key string) (Result, error) {
		do := a.Store.Reconcile
		if dryRun {
			do = a.Store.ReconcileDryRun
		}
		var err error
		if got, err = do(ctx, key, delivered); err != nil {
			return Result{}, mailError(key, err)
		}
		return Result{Summary: ReconcileLine(KeyResult{Key: key, Disposition: Reconciled, Result: got}, dryRun)}, nil
	})
	return res, got, err
}

// Reconciler returns the Reconciler of ReconcileKeys that settles each key
// through a.Reconcile: normalised, refused and audited as one `mailsvc
// mail reconcile KEY` is, each key with its own audit row.
func (a *Actions) Reconciler(who Actor, reason string) Reconciler {
	return auditedReconciler{a: a, who: who, reason: reason}
}

type auditedReconciler struct {
	a      *Actions
	who    Actor
	reason string
}

func (r auditedReconciler) Reconcile(ctx context.Context, key string, delivered bool) (store.ReconcileResult, error) {
	_, got, err := r.a.reconcile(ctx, r.who, key, delivered, r.reason, false)
	return got, err
}

func (r auditedReconciler) ReconcileDryRun(ctx context.Context, key string, delivered bool) (store.ReconcileResult, error) {
	_, got, err := r.a.reconcile(ctx, r.who, key, delivered, r.reason, true)
	return got, err
}
