package operator

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mailsvc/mailsvc/internal/mailtype"
	"github.com/mailsvc/mailsvc/internal/store"
)

// ActionOutboxRepublish is the audit log's name of `mailsvc outbox
// republish`.
const ActionOutboxRepublish = "outbox-republish"

// RepublishFunc publishes events again, in the order given, and returns
// how many the broker confirmed (relay.Republish in the CLI).
type RepublishFunc func(ctx context.Context, events []store.PublishedEvent) (int, error)

// RepublishRequest is what an operator asked to republish: the orders
// (as typed; normalised by OrderID), the published_at range [Since,
// Until) and the event types (mailtype.OutputEventTypes). At least one of
// them must be given: a republish of every kept event is never what an
// incident needs by accident. KeptFor is retention.window.
type RepublishRequest struct {
	OrderIDs     []string
	Since, Until time.Time
	Types        []string
	KeptFor      time.Duration
}

// filter checks and normalises r, or returns an *InputError.
func (r RepublishRequest) filter() (store.RepublishFilter, error) {
	f := store.RepublishFilter{Since: r.Since, Until: r.Until, KeptFor: r.KeptFor}
	if len(r.OrderIDs) == 0 && len(r.Types) == 0 && r.Since.IsZero() && r.Until.IsZero() {
		return f, &InputError{Problem: "nothing selected", Hint: "give --order, --orders-from, --since, --until or --type"}
	}
	if !r.Since.IsZero() && !r.Until.IsZero() && !r.Since.Before(r.Until) {
		return f, &InputError{Problem: fmt.Sprintf("an empty time range: --since %s is not before --until %s", Stamp(&r.Since), Stamp(&r.Until))}
	}
	for _, id := range r.OrderIDs {
		n, err := OrderID(id)
		if err != nil {
			return f, err
		}
		if !slices.Contains(f.OrderIDs, n) {
			f.OrderIDs = append(f.OrderIDs, n)
		}
	}
	for _, t := range r.Types {
		t = strings.TrimFunc(t, isSpace)
		if !slices.Contains(mailtype.OutputEventTypes, mailtype.EventType(t)) {
			return f, &InputError{Problem: "not a feedback event type", Input: t, Hint: fmt.Sprintf("one of %v", mailtype.OutputEventTypes)}
		}
		f.Types = append(f.Types, t)
	}
	return f, nil
}

// target is the request as its audit row names it (normalised when f is
// valid), at most a few hundred bytes whatever the number of orders.
func (r RepublishRequest) target(f store.RepublishFilter, ferr error) string {
	if ferr == nil {
		r.OrderIDs, r.Types = f.OrderIDs, f.Types
	}
	var parts []string
	if n := len(r.OrderIDs); n > 0 {
		ids := strings.Join(r.OrderIDs[:min(n, 10)], ",")
		if n > 10 {
			ids += fmt.Sprintf(",... (%d orders)", n)
		}
		parts = append(parts, "orders "+cut(ids))
	}
	if !r.Since.IsZero() || !r.Until.IsZero() {
		parts = append(parts, fmt.Sprintf("published [%s, %s)", orAny(Stamp(&r.Since)), orAny(Stamp(&r.Until))))
	}
	if len(r.Types) > 0 {
		parts = append(parts, "types "+strings.Join(r.Types, ","))
	}
	if len(parts) == 0 {
		return "outbox: (nothing selected)"
	}
	return "outbox: " + strings.Join(parts, "; ")
}

func orAny(s string) string {
	if s == "" {
		return "*"
	}
	return s
}

// Republish publishes again the published feedback events r selects
// (store.PublishedEvents: those still kept, within retention.window), in
// the order they were written, through publish; each keeps its event_id
// as message_id and in its body, so a consumer that dedupes on it takes
// it at most once. Dry, it reads them and publishes nothing. It returns
// the events selected (for a dry run's listing) with the result; an
// *InputError for a request that selects nothing or cannot mean anything,
// ErrNoBroker when publish is nil. Errors: see KindOf.
func (a *Actions) Republish(ctx context.Context, who Actor, r RepublishRequest, reason string, dryRun bool,
	publish RepublishFunc) (Result, []store.PublishedEvent, error) {
	var events []store.PublishedEvent
	f, ferr := r.filter()
	x := act{who: who, name: ActionOutboxRepublish, target: r.target(f, ferr), reason: reason, dryRun: dryRun}
	res, err := a.run(ctx, x, func(string) (Result, error) {
		if ferr != nil {
			return Result{}, ferr
		}
		var err error
		if events, err = a.Store.PublishedEvents(ctx, f); err != nil {
			return Result{}, err
		}
		what := describeEvents(events)
		switch {
		case len(events) == 0:
			return Result{Summary: fmt.Sprintf("no published feedback event matches (published events are kept for retention.window, %s)", r.KeptFor)}, nil
		case dryRun:
			return Result{Summary: "would republish " + what + " (dry run: nothing published)"}, nil
		case publish == nil:
			return Result{}, &refusal{"no broker configured to republish to (amqp.url)", ErrNoBroker}
		}
		n, err := publish(ctx, events)
		if err != nil {
			return Result{Summary: fmt.Sprintf("republished %d of %s", n, what)},
				fmt.Errorf("republished %d of %s, then: %w", n, what, err)
		}
		return Result{Summary: "republished " + what + " with their own event ids, marked " + republishMark}, nil
	})
	return res, events, err
}

// republishMark is how a republished message is marked (relay.HeaderRepublish).
const republishMark = "x-mailsvc-republish: true"

// describeEvents is "N feedback events of M orders (EmailSent 3, ...)".
func describeEvents(events []store.PublishedEvent) string {
	var types []string
	count := map[string]int{}
	orders := map[string]bool{}
	for _, e := range events {
		if count[e.EventType] == 0 {
			types = append(types, e.EventType)
		}
		count[e.EventType]++
		orders[e.OrderID] = true
	}
	parts := make([]string, len(types))
	for i, t := range types {
		parts[i] = fmt.Sprintf("%s %d", t, count[t])
	}
	return fmt.Sprintf("%d feedback events of %d orders (%s)", len(events), len(orders), strings.Join(parts, ", "))
}
