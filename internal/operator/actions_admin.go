package operator

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/mailsvc/mailsvc/internal/store"
)

// providerName is the provider an operator named (space around removed):
// smtp or resend, else an error wrapping ErrNoProvider.
func providerName(s string) (string, error) {
	name := strings.TrimFunc(s, isSpace)
	if name != "smtp" && name != "resend" {
		return "", &refusal{fmt.Sprintf("no provider %q: smtp or resend", s), ErrNoProvider}
	}
	return name, nil
}

// ResumeProvider ends the pause of provider (smtp or resend, else an
// error wrapping ErrNoProvider) now and closes its breaker, for every
// replica (store.ProviderRecovered). Result.Summary is "NAME: VERDICT"
// (ProviderVerdict of the new state); dry, the state now and that it would
// be resumed. Errors: see KindOf.
func (a *Actions) ResumeProvider(ctx context.Context, who Actor, provider, reason string, dryRun bool) (Result, error) {
	x := act{who: who, name: ActionProviderResume, target: provider, reason: reason, dryRun: dryRun, norm: providerName}
	return a.run(ctx, x, func(name string) (Result, error) {
		if dryRun {
			st, err := a.Store.ProviderState(ctx, name)
			if err != nil {
				return Result{}, err
			}
			return Result{Summary: fmt.Sprintf("would resume %s, now %s (dry run: nothing changed)", name, ProviderVerdict(st))}, nil
		}
		st, err := a.Store.ProviderRecovered(ctx, name, true)
		if err != nil {
			return Result{}, err
		}
		return Result{Summary: st.Provider + ": " + ProviderVerdict(st)}, nil
	})
}

// NotSuppressedError is the refusal to remove an address that is not on
// the suppression list. It wraps store.ErrNotFound.
func NotSuppressedError(address string) error {
	return &refusal{fmt.Sprintf("%q is not on the suppression list (see `mailsvc suppression list`)", address), store.ErrNotFound}
}

// Suppress adds address (normalised by Address) to the suppression list,
// source operator, with reason as the entry's reason (store.Suppress); an
// address listed already keeps its entry. Dry, it reads the entry in
// force. Errors: see KindOf.
func (a *Actions) Suppress(ctx context.Context, who Actor, address, reason string, dryRun bool) (Result, error) {
	x := act{who: who, name: ActionSuppress, target: address, reason: reason, dryRun: dryRun, norm: Address}
	return a.run(ctx, x, func(addr string) (Result, error) {
		if dryRun {
			entry, err := a.entry(ctx, addr)
			if err != nil {
				return Result{}, err
			}
			if entry == nil {
				return Result{Summary: "would suppress " + addr + ": no mail would be sent to it from the next claim on (dry run: nothing changed)"}, err
			}
			return Result{Summary: alreadySuppressed(*entry) + " (dry run: nothing changed)"}, nil
		}
		s, added, err := a.Store.Suppress(ctx, addr, reason, store.SourceOperator)
		if err != nil {
			return Result{}, err
		}
		if !added {
			return Result{Summary: alreadySuppressed(s)}, nil
		}
		return Result{Summary: fmt.Sprintf("suppressed %s: no mail is sent to it from the next claim on; undo with `mailsvc suppression remove %s`",
			s.Address, s.Address)}, nil
	})
}

func alreadySuppressed(s store.Suppression) string {
	return fmt.Sprintf("%s was suppressed already: since %s, source %s, reason %q (kept)", s.Address, Stamp(&s.CreatedAt), s.Source, s.Reason)
}

// entry is the suppression entry in force for addr, nil for none.
func (a *Actions) entry(ctx context.Context, addr string) (*store.Suppression, error) {
	h, err := a.Store.SuppressionHistoryOf(ctx, addr)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	return h.Entry, err
}

// Unsuppress removes address (normalised by Address) from the suppression
// list (store.Unsuppress): mails to it are sent again from their next
// claim. NotSuppressedError when it is not listed. Dry, it reads the entry
// it would remove. Errors: see KindOf.
func (a *Actions) Unsuppress(ctx context.Context, who Actor, address, reason string, dryRun bool) (Result, error) {
	x := act{who: who, name: ActionUnsuppress, target: address, reason: reason, dryRun: dryRun, norm: Address}
	return a.run(ctx, x, func(addr string) (Result, error) {
		if dryRun {
			entry, err := a.entry(ctx, addr)
			if err != nil {
				return Result{}, err
			}
			if entry == nil {
				return Result{}, NotSuppressedError(addr)
			}
			return Result{Summary: fmt.Sprintf("would remove %s (source %s, since %s, reason %q); mails to it would be sent again (dry run: nothing changed)",
				entry.Address, entry.Source, Stamp(&entry.CreatedAt), entry.Reason)}, nil
		}
		s, err := a.Store.Unsuppress(ctx, addr)
		if errors.Is(err, store.ErrNotFound) {
			return Result{}, NotSuppressedError(addr)
		}
		if err != nil {
			return Result{}, err
		}
		return Result{Summary: fmt.Sprintf("removed %s (source %s, since %s, reason %q); mails to it are sent again",
			s.Address, s.Source, Stamp(&s.CreatedAt), s.Reason)}, nil
	})
}

// ReplayDeadLetters replays the dead-letter queue through a.ReplayDLQ
// (dry, it only counts); ErrNoBroker when a.ReplayDLQ is nil.
// Result.Summary is what ReplayDLQ returned (how many messages were
// replayed, skipped and left), kept with its error too: the audit row's
// detail says how many were replayed before the error ("nothing
// replayed" when the replay could not start).
func (a *Actions) ReplayDeadLetters(ctx context.Context, who Actor, reason string, dryRun bool) (Result, error) {
	return a.ReplayDeadLettersWhere(ctx, who, "", reason, dryRun)
}
