package store

import (
	"fmt"
	"time"
)

// DeliveryConfirm is the rule of the "delivery unconfirmed" flag
// (docs/design.md, "Delivery unconfirmed"): a mail is flagged when it is
// sent, through one of Providers, has no delivery report (delivered_at)
// and no complaint report (complained_at; a bounce makes it failed, so it
// is no longer sent), and was sent (sent_at) at least After ago on the
// database's clock. The flag is computed when read: it changes no row,
// never resends, and clears by itself when a report arrives later. The
// zero value flags nothing.
type DeliveryConfirm struct {
	// Providers are the providers that report deliveries
	// (config.DeliveryReporters); none turns the flag off.
	Providers []string
	// After is mail.delivery_confirm_after; 0 turns the flag off.
	After time.Duration
}

// On reports whether the rule flags anything at all.
func (d DeliveryConfirm) On() bool { return d.After > 0 && len(d.Providers) > 0 }

// args are the rule's two query arguments: the providers (text[], empty
// when off, so no mail matches) and After (an interval).
func (d DeliveryConfirm) args() []any {
	if !d.On() {
		return []any{[]string{}, time.Duration(0)}
	}
	return []any{d.Providers, d.After}
}

// UnconfirmedWindow is the window of Stats.UnconfirmedRecent: the mails
// whose confirmation deadline (sent_at + After) passed within it.
const UnconfirmedWindow = time.Hour

// unconfirmedWhere is the flag's predicate, the one definition that the
// stats, the list and the mail view use: %[1]s is the placeholder of the
// providers (text[]), %[2]s that of After (interval). Its first three
// terms are the predicate of mail_unconfirmed_idx (migration 00210), which
// the planner proves without parameter values (generic plans), and
// provider and sent_at are that index's columns.
const unconfirmedWhere = `status = 'sent' AND delivered_at IS NULL AND complained_at IS NULL
    AND provider = ANY (%[1]s::text[]) AND sent_at <= now() - %[2]s::interval`

// unconfirmed returns unconfirmedWhere with the placeholders $p and $p+1.
func unconfirmed(p int) string {
	return fmt.Sprintf(unconfirmedWhere, fmt.Sprintf("$%d", p), fmt.Sprintf("$%d", p+1))
}
